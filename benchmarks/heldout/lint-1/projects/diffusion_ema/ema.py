import copy

import torch


class EMA:
    def __init__(self, model, decay=0.9999, warmup=2000):
        self.shadow = copy.deepcopy(model)
        self.decay = decay
        self.warmup = warmup
        self.num_updates = 0

    @torch.no_grad()
    def update(self, model):
        self.num_updates += 1
        d = min(self.decay, (1 + self.num_updates) / (self.warmup + self.num_updates))
        for ema_p, p in zip(self.shadow.parameters(), model.parameters()):
            ema_p.mul_(d).add_(p, alpha=1 - d)
        for ema_b, b in zip(self.shadow.buffers(), model.buffers()):
            ema_b.copy_(b)

    def state_dict(self):
        return {"shadow": self.shadow.state_dict(), "num_updates": self.num_updates}
