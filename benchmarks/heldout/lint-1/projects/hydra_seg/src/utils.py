import logging
import os

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


class ConfusionMatrix:
    def __init__(self, num_classes, device):
        self.n = num_classes
        self.mat = torch.zeros(num_classes, num_classes, dtype=torch.int64, device=device)

    def update(self, logits, target):
        pred = logits.argmax(1).flatten()
        target = target.flatten()
        k = (target >= 0) & (target < self.n)
        self.mat += torch.bincount(self.n * target[k] + pred[k], minlength=self.n ** 2).reshape(self.n, self.n)

    def miou(self):
        m = self.mat.double()
        iou = torch.diag(m) / (m.sum(0) + m.sum(1) - torch.diag(m)).clamp(min=1)
        return iou.mean().item()


@torch.no_grad()
def evaluate(model, loader, num_classes, device):
    model.eval()
    cm = ConfusionMatrix(num_classes, device)
    for images, masks in loader:
        images = images.to(device, non_blocking=True)
        masks = masks.to(device, non_blocking=True)
        cm.update(model(images)["out"], masks)
    return cm.miou()


def setup_dist():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    return dist.get_rank(), dist.get_world_size(), local_rank


def save_checkpoint(state, out_dir, name):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    torch.save(state, path)
    log.info("saved %s", path)
