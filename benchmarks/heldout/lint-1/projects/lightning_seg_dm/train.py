import argparse

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint

from datamodule import PolypDataModule
from module import SegModule


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", default="data/kvasir")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--bs", type=int, default=16)
    p.add_argument("--encoder", default="resnet34")
    args = p.parse_args()

    L.seed_everything(42)
    dm = PolypDataModule(args.root, batch_size=args.bs)
    model = SegModule(args.encoder)
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="gpu",
        devices=1,
        precision="16-mixed",
        gradient_clip_val=1.0,
        callbacks=[ModelCheckpoint(monitor="val/dice", mode="max"), LearningRateMonitor()],
        log_every_n_steps=20,
    )
    trainer.fit(model, datamodule=dm)


if __name__ == "__main__":
    main()
