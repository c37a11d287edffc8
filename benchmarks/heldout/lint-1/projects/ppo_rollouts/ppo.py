import argparse
import logging

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Normal

from storage import RolloutStorage

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("ppo")


class ActorCritic(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden=256):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                   nn.Linear(hidden, act_dim))
        self.critic = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                    nn.Linear(hidden, 1))
        self.log_std = nn.Parameter(torch.zeros(act_dim))

    def dist(self, obs):
        return Normal(self.actor(obs), self.log_std.exp())

    def value(self, obs):
        return self.critic(obs).squeeze(-1)


def collect_rollout(envs, policy, storage, obs, device):
    for _ in range(storage.num_steps):
        d = policy.dist(obs)
        action = d.sample()
        logprob = d.log_prob(action).sum(-1)
        value = policy.value(obs)
        next_obs, reward, term, trunc, _ = envs.step(action.cpu().numpy())
        done = np.logical_or(term, trunc)
        storage.insert(obs, action, logprob, value,
                       torch.as_tensor(reward, device=device, dtype=torch.float32),
                       torch.as_tensor(done, device=device, dtype=torch.float32))
        obs = torch.as_tensor(next_obs, device=device, dtype=torch.float32)
    return obs


def ppo_update(policy, optimizer, storage, last_obs, args):
    with torch.no_grad():
        last_value = policy.value(last_obs)
    adv, returns = storage.compute_gae(last_value)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    for _ in range(args.ppo_epochs):
        for obs, act, old_logp, b_adv, b_ret in storage.minibatches(adv, returns, args.minibatches):
            d = policy.dist(obs)
            ratio = (d.log_prob(act).sum(-1) - old_logp).exp()
            pg = -torch.min(ratio * b_adv, ratio.clamp(1 - args.clip, 1 + args.clip) * b_adv).mean()
            v_loss = 0.5 * (policy.value(obs) - b_ret).pow(2).mean()
            loss = pg + args.vf_coef * v_loss - args.ent_coef * d.entropy().sum(-1).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward(retain_graph=True)
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
    return loss.detach()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="HalfCheetah-v4")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=2048)
    p.add_argument("--iters", type=int, default=500)
    p.add_argument("--ppo-epochs", type=int, default=10)
    p.add_argument("--minibatches", type=int, default=32)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--ent-coef", type=float, default=0.0)
    args = p.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(args.env) for _ in range(args.num_envs)])
    obs_dim = envs.single_observation_space.shape[0]
    act_dim = envs.single_action_space.shape[0]
    policy = ActorCritic(obs_dim, act_dim).to(device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4, eps=1e-5)
    storage = RolloutStorage(args.num_steps, args.num_envs, obs_dim, device)

    obs, _ = envs.reset(seed=1)
    obs = torch.as_tensor(obs, device=device, dtype=torch.float32)
    for it in range(args.iters):
        obs = collect_rollout(envs, policy, storage, obs, device)
        loss = ppo_update(policy, optimizer, storage, obs, args)
        if it % 10 == 0:
            log.info("iter %d loss %.4f mean reward %.3f", it, loss.item(), storage.rewards.mean().item())
        storage.reset()
    torch.save(policy.state_dict(), "ppo_policy.pt")


if __name__ == "__main__":
    main()
