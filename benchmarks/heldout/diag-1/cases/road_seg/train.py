import argparse
import os

import torch
import torch.nn.functional as F

import utils
from model import LiteSeg


def train_one_epoch(model, optimizer, data_loader, device, epoch, confmat, logger, max_iters, scaler_dtype):
    model.train()
    it = 0
    for image, target in data_loader:
        with torch.autocast(device_type=device, dtype=scaler_dtype, enabled=device == "cuda"):
            output = model(image)
            loss = F.cross_entropy(output.float(), target, ignore_index=255)

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        # running train mIoU, reported next to the loss
        confmat.update(target.flatten().cpu(), output.detach().float().cpu().argmax(1).flatten())

        if it % logger.print_freq == 0:
            logger.update(loss=loss.item(), lr=optimizer.param_groups[0]["lr"])
            logger.maybe_print(it, header=f"Epoch: [{epoch}]")
        it += 1
        if it >= max_iters:
            break
    return it


def get_args():
    p = argparse.ArgumentParser(description="LiteSeg training")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--crop", type=int, default=384)
    p.add_argument("--num-classes", type=int, default=19)
    p.add_argument("--lr", type=float, default=0.02)
    return p.parse_args()


def main(args):
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if os.environ.get("SMOKE") == "1":
        args.batch_size, args.crop = 2, 64
    torch.backends.cudnn.benchmark = True

    data = utils.SyntheticStreets(4, args.batch_size, args.crop, args.num_classes, device)
    model = LiteSeg(args.num_classes).to(device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    logger = utils.MetricLogger(print_freq=50)
    confmat = utils.ConfusionMatrix(args.num_classes)

    done, epoch = 0, 0
    while done < args.steps:
        done += train_one_epoch(model, optimizer, data, device, epoch, confmat, logger,
                                args.steps - done, torch.bfloat16)
        epoch += 1
    acc, miou = confmat.compute()
    print(f"train pixel acc {acc:.3f}  mIoU {miou:.3f}")


if __name__ == "__main__":
    main(get_args())
