import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import VGG19_Weights, vgg19


class VGGPerceptualLoss(nn.Module):
    def __init__(self, layer=35):
        super().__init__()
        vgg = vgg19(weights=VGG19_Weights.IMAGENET1K_V1).features[:layer]
        vgg.eval()
        vgg.requires_grad_(False)
        self.vgg = vgg
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def train(self, mode=True):
        super().train(mode)
        self.vgg.eval()
        return self

    def forward(self, sr, hr):
        f_sr = self.vgg((sr - self.mean) / self.std)
        with torch.no_grad():
            f_hr = self.vgg((hr - self.mean) / self.std)
        return F.mse_loss(f_sr, f_hr)


def psnr(sr, hr):
    mse = F.mse_loss(sr.clamp(0, 1), hr, reduction="none").flatten(1).mean(1)
    return (10 * torch.log10(1.0 / mse.clamp(min=1e-10))).mean()
