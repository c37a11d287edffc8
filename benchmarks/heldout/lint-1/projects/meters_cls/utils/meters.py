import torch


class AverageMeter:
    """Computes and stores the average and current value."""

    def __init__(self, name, fmt=":f"):
        self.name = name
        self.fmt = fmt
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = "{name} {val" + self.fmt + "} ({avg" + self.fmt + "})"
        return fmtstr.format(name=self.name, val=float(self.val), avg=float(self.avg))


class TopKAccuracy:
    def __init__(self, topk=(1, 5)):
        self.topk = topk
        self.reset()

    def reset(self):
        self.correct = {k: 0 for k in self.topk}
        self.total = 0

    def update(self, logits, target):
        maxk = max(self.topk)
        _, pred = logits.topk(maxk, dim=1)
        hit = pred.eq(target.view(-1, 1))
        for k in self.topk:
            self.correct[k] += hit[:, :k].any(dim=1).sum().item()
        self.total += target.size(0)

    def compute(self):
        return {f"top{k}": 100.0 * c / max(self.total, 1) for k, c in self.correct.items()}
