import collections
import logging
import time

import torch

log = logging.getLogger(__name__)


class MetricLogger:
    def __init__(self, print_freq=20):
        self.print_freq = print_freq
        self.totals = collections.defaultdict(float)
        self.count = 0
        self.pending = []

    def update(self, **tensors):
        self.pending.append({k: v.detach() for k, v in tensors.items()})
        self.count += 1
        if self.count % self.print_freq == 0:
            self.flush()

    def flush(self):
        for entry in self.pending:
            for k, v in entry.items():
                self.totals[k] += float(v)
        self.pending.clear()
        msg = "  ".join(f"{k} {v / self.count:.4f}" for k, v in self.totals.items())
        log.info("[%d] %s", self.count, msg)


def train_one_epoch(model, loader, optimizer, scaler, device, epoch, max_norm=10.0):
    model.train()
    meter = MetricLogger(print_freq=50)
    t0 = time.time()
    for images, targets in loader:
        images = [img.to(device, non_blocking=True) for img in images]
        targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]
        with torch.autocast("cuda", dtype=torch.float16):
            loss_dict = model(images, targets)
            losses = sum(loss_dict.values())
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(losses).backward()
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        meter.update(loss=losses, **loss_dict)
    log.info("epoch %d took %.1fs", epoch, time.time() - t0)


@torch.inference_mode()
def evaluate(model, loader, device, iou_thresh=0.5):
    model.eval()
    hits, total = 0, 0
    for images, targets in loader:
        images = [img.to(device) for img in images]
        outputs = model(images)
        for out, tgt in zip(outputs, targets):
            gt = tgt["boxes"].to(device)
            if len(gt) == 0 or len(out["boxes"]) == 0:
                total += len(gt)
                continue
            from torchvision.ops import box_iou
            best = box_iou(gt, out["boxes"]).max(dim=1).values
            hits += (best >= iou_thresh).sum()
            total += len(gt)
    return float(hits) / max(total, 1)
