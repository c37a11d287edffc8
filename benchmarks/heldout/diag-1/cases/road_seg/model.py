import torch
from torch import nn
import torch.nn.functional as F


def block(cin, cout, stride=1, dilation=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=dilation, dilation=dilation, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class LiteSeg(nn.Module):
    """Stride-8 dilated FCN with a light ASPP-ish context module."""

    def __init__(self, num_classes=19, widths=(32, 64, 128)):
        super().__init__()
        w1, w2, w3 = widths
        self.encoder = nn.Sequential(
            block(3, w1, 2), block(w1, w1),
            block(w1, w2, 2), block(w2, w2),
            block(w2, w3, 2), block(w3, w3),
        )
        self.context = nn.ModuleList([block(w3, w3, dilation=d) for d in (1, 2, 4)])
        self.fuse = block(3 * w3, w3)
        self.classifier = nn.Conv2d(w3, num_classes, 1)

    def forward(self, x):
        size = x.shape[-2:]
        f = self.encoder(x)
        f = self.fuse(torch.cat([c(f) for c in self.context], 1))
        return F.interpolate(self.classifier(f), size=size, mode="bilinear", align_corners=False)
