import torch
import torch.nn as nn
import torch.nn.functional as F


class PatchConvNet(nn.Module):
    def __init__(self, channels=3, width=96, num_classes=100):
        super().__init__()
        w2 = width // 2
        self.stem = nn.Sequential(nn.Conv2d(channels, w2, kernel_size=4, stride=4), nn.BatchNorm2d(w2), nn.GELU())
        self.down = nn.Sequential(nn.Conv2d(w2, width, kernel_size=2, stride=2), nn.BatchNorm2d(width), nn.GELU())
        self.block = nn.Sequential(nn.Conv2d(width, width, kernel_size=3, padding=1), nn.BatchNorm2d(width), nn.GELU())
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.down(x)
        x = x + self.block(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


def gpu_normalize(imgs_u8, mean, std):
    m = torch.tensor(mean, device=imgs_u8.device, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, device=imgs_u8.device, dtype=torch.float32).view(1, -1, 1, 1)
    return imgs_u8.float().div_(255.0).sub_(m).div_(s)
