import lightning as L
import segmentation_models_pytorch as smp
import torch
import torch.nn.functional as F


def dice_loss(logits, target, eps=1.0):
    p = torch.sigmoid(logits).flatten(1)
    t = target.flatten(1)
    return 1 - ((2 * (p * t).sum(1) + eps) / (p.sum(1) + t.sum(1) + eps)).mean()


class SegModule(L.LightningModule):
    def __init__(self, encoder="resnet34", lr=3e-4):
        super().__init__()
        self.save_hyperparameters()
        self.net = smp.Unet(encoder, encoder_weights="imagenet", classes=1)
        self.train_losses = []
        self.val_dice = []

    def forward(self, x):
        return self.net(x).squeeze(1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.binary_cross_entropy_with_logits(logits, y) + dice_loss(logits, y)
        self.train_losses.append(loss)
        return loss

    def on_train_epoch_end(self):
        self.log("train/loss_epoch", torch.stack(self.train_losses).mean())
        self.train_losses.clear()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.val_dice.append(1 - dice_loss(logits, y))
        self.log("val/bce", F.binary_cross_entropy_with_logits(logits, y), on_epoch=True)

    def on_validation_epoch_end(self):
        self.log("val/dice", torch.stack(self.val_dice).mean(), prog_bar=True)
        self.val_dice.clear()

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.trainer.max_epochs)
        return {"optimizer": opt, "lr_scheduler": sched}
