import torch
from torch import nn


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class TileNet(nn.Module):
    def __init__(self, bands=12, num_classes=10, widths=(64, 128, 256)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(bands, widths[0], 4, stride=4, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        layers = []
        cin = widths[0]
        for i, w in enumerate(widths):
            layers.append(conv_bn(cin, w, stride=1 if i == 0 else 2))
            layers.append(conv_bn(w, w))
            cin = w
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.body(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
