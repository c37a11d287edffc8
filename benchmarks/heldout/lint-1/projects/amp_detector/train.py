import argparse
import logging

import torch
import torchvision

from data import build_loader
from engine import evaluate, train_one_epoch

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("det")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", default="/data/coco/train2017")
    p.add_argument("--ann", default="/data/coco/annotations/instances_train2017.json")
    p.add_argument("--val-root", default="/data/coco/val2017")
    p.add_argument("--val-ann", default="/data/coco/annotations/instances_val2017.json")
    p.add_argument("--epochs", type=int, default=26)
    p.add_argument("--bs", type=int, default=4)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.02)
    args = p.parse_args()

    device = torch.device("cuda")
    model = torchvision.models.detection.fasterrcnn_resnet50_fpn_v2(weights=None, num_classes=91).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[16, 22], gamma=0.1)
    scaler = torch.amp.GradScaler("cuda")

    train_loader = build_loader(args.root, args.ann, args.bs, args.workers, train=True)
    val_loader = build_loader(args.val_root, args.val_ann, 1, args.workers, train=False)

    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, optimizer, scaler, device, epoch)
        scheduler.step()
        recall = evaluate(model, val_loader, device)
        log.info("epoch %d recall@0.5 %.4f", epoch, recall)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(), "epoch": epoch}, f"frcnn_e{epoch}.pth")


if __name__ == "__main__":
    main()
