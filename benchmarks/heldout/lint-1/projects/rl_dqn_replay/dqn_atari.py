"""DQN with a replay buffer and a periodically synced target network."""
import argparse
import collections
import logging
import random
import time

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
log = logging.getLogger("dqn")

Transition = collections.namedtuple("Transition", "obs action reward next_obs done")


class ReplayBuffer:
    def __init__(self, capacity, obs_shape):
        self.capacity = capacity
        self.obs = np.zeros((capacity, *obs_shape), dtype=np.uint8)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype=np.uint8)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.dones = np.zeros(capacity, dtype=np.float32)
        self.idx = 0
        self.full = False

    def push(self, t: Transition):
        i = self.idx
        self.obs[i], self.next_obs[i] = t.obs, t.next_obs
        self.actions[i], self.rewards[i], self.dones[i] = t.action, t.reward, t.done
        self.idx = (self.idx + 1) % self.capacity
        self.full = self.full or self.idx == 0

    def __len__(self):
        return self.capacity if self.full else self.idx

    def sample(self, batch_size, device):
        ix = np.random.randint(0, len(self), size=batch_size)
        to = lambda a: torch.from_numpy(a[ix]).to(device, non_blocking=False)  # noqa: E731
        return to(self.obs), to(self.actions), to(self.rewards), to(self.next_obs), to(self.dones)


class QNetwork(nn.Module):
    def __init__(self, n_actions):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(4, 32, 8, 4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, n_actions))

    def forward(self, x):
        return self.head(self.conv(x.float() / 255.0))


class Agent:
    def __init__(self, n_actions, device, lr=1e-4, gamma=0.99):
        self.device = device
        self.n_actions = n_actions
        self.gamma = gamma
        self.policy = QNetwork(n_actions).to(device)
        self.target = QNetwork(n_actions).to(device)
        self.target.load_state_dict(self.policy.state_dict())
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr)

    def act(self, obs, eps):
        if random.random() < eps:
            return random.randrange(self.n_actions)
        with torch.no_grad():
            q = self.policy(torch.as_tensor(obs, device=self.device).unsqueeze(0))
        return int(q.argmax(dim=1).item())

    def learn(self, batch):
        obs, actions, rewards, next_obs, dones = batch
        q = self.policy(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        next_q = self.target(next_obs).max(dim=1).values
        target = rewards + self.gamma * (1.0 - dones) * next_q
        loss = F.smooth_l1_loss(q, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.policy.parameters(), 10.0)
        self.optimizer.step()
        return loss

    def sync_target(self):
        self.target.load_state_dict(self.policy.state_dict())


def make_env(env_id):
    env = gym.make(env_id)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=1)
    return gym.wrappers.FrameStackObservation(env, 4)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="ALE/Breakout-v5")
    p.add_argument("--total-steps", type=int, default=5_000_000)
    p.add_argument("--buffer", type=int, default=500_000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--learn-start", type=int, default=50_000)
    p.add_argument("--target-every", type=int, default=10_000)
    args = p.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = make_env(args.env)
    agent = Agent(env.action_space.n, device)
    buf = ReplayBuffer(args.buffer, env.observation_space.shape)

    obs, _ = env.reset(seed=0)
    episode_return, episode_losses = 0.0, []
    t0 = time.time()
    for step in range(args.total_steps):
        eps = max(0.01, 1.0 - step / 1_000_000)
        action = agent.act(np.asarray(obs), eps)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        buf.push(Transition(np.asarray(obs), action, reward, np.asarray(next_obs), float(terminated)))
        obs = next_obs
        episode_return += reward

        if step >= args.learn_start and step % 4 == 0:
            loss = agent.learn(buf.sample(args.batch, device))
            episode_losses.append(loss)
        if step % args.target_every == 0:
            agent.sync_target()

        if terminated or truncated:
            mean_loss = torch.stack(episode_losses).mean().item() if episode_losses else float("nan")
            log.info("step %d return %.1f loss %.4f fps %.0f", step, episode_return, mean_loss,
                     step / (time.time() - t0))
            obs, _ = env.reset()
            episode_return, episode_losses = 0.0, []

    torch.save(agent.policy.state_dict(), "dqn_policy.pt")


if __name__ == "__main__":
    main()
