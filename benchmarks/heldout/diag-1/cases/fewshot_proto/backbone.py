from torch import nn


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.1),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.1),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
        )
        self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.out = nn.Sequential(nn.LeakyReLU(0.1), nn.MaxPool2d(2))

    def forward(self, x):
        return self.out(self.body(x) + self.skip(x))


class ResNet12(nn.Module):
    def __init__(self, widths=(64, 160, 320, 640)):
        super().__init__()
        layers, cin = [], 3
        for w in widths:
            layers.append(ResBlock(cin, w))
            cin = w
        self.layers = nn.Sequential(*layers)
        self.out_dim = cin

    def forward(self, x):
        return self.layers(x).mean((2, 3))
