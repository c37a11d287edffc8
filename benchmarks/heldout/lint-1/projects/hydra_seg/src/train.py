import logging

import hydra
import torch
import torch.nn as nn
from omegaconf import DictConfig
from torch.nn.parallel import DistributedDataParallel as DDP
from torchvision.models.segmentation import deeplabv3_resnet50

import config  # noqa: F401  registers the structured config
from data import build_train_loader, build_val_loader
from utils import evaluate, save_checkpoint, setup_dist

log = logging.getLogger(__name__)


def poly_lr(optimizer, base_lr, it, max_it, power=0.9):
    lr = base_lr * (1 - it / max_it) ** power
    for g in optimizer.param_groups:
        g["lr"] = lr
    return lr


@hydra.main(version_base=None, config_name="seg")
def main(cfg: DictConfig):
    rank, world_size, local_rank = setup_dist()
    device = torch.device("cuda", local_rank)
    torch.backends.cudnn.benchmark = True

    model = deeplabv3_resnet50(num_classes=cfg.num_classes, aux_loss=False).to(device)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model, device_ids=[local_rank])

    train_loader = build_train_loader(cfg, rank, world_size)
    val_loader = build_val_loader(cfg) if rank == 0 else None
    criterion = nn.CrossEntropyLoss(ignore_index=255)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.optim.lr, momentum=cfg.optim.momentum,
                                weight_decay=cfg.optim.weight_decay)

    max_it = cfg.epochs * len(train_loader)
    it = 0
    for epoch in range(cfg.epochs):
        model.train()
        for step, (images, masks) in enumerate(train_loader):
            images = images.to(device)
            masks = masks.to(device)
            out = model(images)["out"]
            loss = criterion(out, masks)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            lr = poly_lr(optimizer, cfg.optim.lr, it, max_it)
            it += 1
            if step % cfg.log_every == 0 and rank == 0:
                log.info("epoch %d step %d loss %.4f lr %.5f", epoch, step, loss.item(), lr)

        if rank == 0 and (epoch + 1) % 10 == 0:
            miou = evaluate(model.module, val_loader, cfg.num_classes, device)
            log.info("epoch %d mIoU %.4f", epoch, miou)
            save_checkpoint({"model": model.module.state_dict(), "epoch": epoch},
                            cfg.out_dir, f"deeplab_e{epoch}.pt")


if __name__ == "__main__":
    main()
