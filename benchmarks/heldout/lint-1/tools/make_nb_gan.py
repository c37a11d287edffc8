import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "projects"))
from mknb import nb
cells = [
("markdown", "## DCGAN on anime faces (64x64)\nRun top to bottom on a single GPU."),
("code", "!pip install -q torchvision\n%load_ext autoreload\n%autoreload 2"),
("code", """import random
import torch
import torch.nn as nn
import torch.optim as optim
import torchvision.datasets as dset
import torchvision.transforms as T
import torchvision.utils as vutils
import matplotlib.pyplot as plt

manualSeed = 999
random.seed(manualSeed)
torch.manual_seed(manualSeed)
dataroot = "data/anime"
batch_size, image_size, nz, ngf, ndf = 128, 64, 100, 64, 64
num_epochs, lr, beta1 = 20, 2e-4, 0.5
device = torch.device("cuda:0")"""),
("code", """dataset = dset.ImageFolder(root=dataroot, transform=T.Compose([
    T.Resize(image_size), T.CenterCrop(image_size), T.ToTensor(),
    T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
]))
dataloader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                         num_workers=4, pin_memory=True, drop_last=True)"""),
("code", """def weights_init(m):
    name = m.__class__.__name__
    if name.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif name.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)

netG = nn.Sequential(
    nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
    nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
    nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
    nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
    nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh(),
).to(device)
netD = nn.Sequential(
    nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
).to(device)
netG.apply(weights_init)
netD.apply(weights_init)
criterion = nn.BCELoss()
fixed_noise = torch.randn(64, nz, 1, 1, device=device)
optimizerD = optim.Adam(netD.parameters(), lr=lr, betas=(beta1, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=lr, betas=(beta1, 0.999))"""),
("code", """img_list, G_losses, D_losses = [], [], []
iters = 0
for epoch in range(num_epochs):
    for i, (real_cpu, _) in enumerate(dataloader):
        real = real_cpu.to(device, non_blocking=True)
        b_size = real.size(0)
        label = torch.full((b_size,), 1.0, dtype=torch.float, device=device)

        netD.zero_grad()
        errD_real = criterion(netD(real).view(-1), label)
        errD_real.backward()
        noise = torch.randn(b_size, nz, 1, 1, device=device)
        fake = netG(noise)
        label.fill_(0.0)
        output = netD(fake).view(-1)
        errD_fake = criterion(output, label)
        errD_fake.backward(retain_graph=True)
        errD = errD_real + errD_fake
        optimizerD.step()

        netG.zero_grad()
        label.fill_(1.0)
        output = netD(fake).view(-1)
        errG = criterion(output, label)
        errG.backward()
        optimizerG.step()

        G_losses.append(errG.item())
        D_losses.append(errD.detach())
        if i % 50 == 0:
            print(f"[{epoch}/{num_epochs}][{i}/{len(dataloader)}] Loss_D {errD.item():.4f} Loss_G {G_losses[-1]:.4f}")
        if (iters % 500 == 0) or ((epoch == num_epochs - 1) and (i == len(dataloader) - 1)):
            with torch.no_grad():
                samples = netG(fixed_noise).detach().cpu()
            img_list.append(vutils.make_grid(samples, padding=2, normalize=True))
        iters += 1"""),
("code", """plt.figure(figsize=(10, 5))
plt.plot(G_losses, label="G")
plt.plot(torch.stack(D_losses).cpu().numpy(), label="D")
plt.legend()
plt.show()"""),
("code", """torch.save(netG, "netG_anime.pth")
torch.save(netD.state_dict(), "netD_anime.pth")"""),
]
nb(cells, "notebook_dcgan/dcgan_anime.ipynb")
