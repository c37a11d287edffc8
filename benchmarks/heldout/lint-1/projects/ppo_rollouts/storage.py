import torch


class RolloutStorage:
    def __init__(self, num_steps, num_envs, obs_dim, device):
        self.obs = torch.zeros(num_steps, num_envs, obs_dim, device=device)
        self.rewards = torch.zeros(num_steps, num_envs, device=device)
        self.dones = torch.zeros(num_steps, num_envs, device=device)
        self.actions, self.logprobs, self.values = [], [], []
        self.num_steps = num_steps
        self.step = 0

    def insert(self, obs, action, logprob, value, reward, done):
        self.obs[self.step] = obs
        self.rewards[self.step] = reward
        self.dones[self.step] = done
        self.actions.append(action)
        self.logprobs.append(logprob)
        self.values.append(value)
        self.step += 1

    def compute_gae(self, last_value, gamma=0.99, lam=0.95):
        values = torch.stack(self.values)
        adv = torch.zeros_like(self.rewards)
        gae = torch.zeros_like(last_value)
        for t in reversed(range(self.num_steps)):
            next_v = last_value if t == self.num_steps - 1 else values[t + 1]
            nonterminal = 1.0 - self.dones[t]
            delta = self.rewards[t] + gamma * next_v * nonterminal - values[t]
            gae = delta + gamma * lam * nonterminal * gae
            adv[t] = gae
        return adv, adv + values

    def minibatches(self, adv, returns, n_mb):
        T, N = self.rewards.shape
        b_obs = self.obs.reshape(T * N, -1)
        b_act = torch.stack(self.actions).reshape(T * N, -1)
        b_logp = torch.stack(self.logprobs).reshape(-1)
        b_adv, b_ret = adv.reshape(-1), returns.reshape(-1)
        idx = torch.randperm(T * N, device=b_obs.device)
        for mb in idx.chunk(n_mb):
            yield b_obs[mb], b_act[mb], b_logp[mb], b_adv[mb], b_ret[mb]

    def reset(self):
        self.actions, self.logprobs, self.values = [], [], []
        self.step = 0
