import argparse

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

from gan_module import GAN


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="data/celeba")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=8)
    args = p.parse_args()

    tf = transforms.Compose([
        transforms.Resize(32),
        transforms.CenterCrop(32),
        transforms.ToTensor(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    ])
    ds = datasets.ImageFolder(args.data, transform=tf)
    train_loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                              num_workers=args.workers, pin_memory=True, drop_last=True)
    val_loader = DataLoader(torch.utils.data.Subset(ds, range(64)), batch_size=64, num_workers=2)

    model = GAN()
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="gpu",
        devices=1,
        callbacks=[ModelCheckpoint(save_last=True)],
        log_every_n_steps=50,
    )
    trainer.fit(model, train_loader, val_loader)


if __name__ == "__main__":
    main()
