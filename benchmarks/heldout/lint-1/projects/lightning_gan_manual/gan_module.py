import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class Generator(nn.Module):
    def __init__(self, latent_dim=128, ch=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(latent_dim, ch * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ch * 8), nn.ReLU(True),
            nn.ConvTranspose2d(ch * 8, ch * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ch * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ch * 4, ch * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ch * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ch * 2, 3, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.net(z.view(z.size(0), -1, 1, 1))


class Discriminator(nn.Module):
    def __init__(self, ch=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, ch, 4, 2, 1), nn.LeakyReLU(0.2, True),
            nn.Conv2d(ch, ch * 2, 4, 2, 1), nn.BatchNorm2d(ch * 2), nn.LeakyReLU(0.2, True),
            nn.Conv2d(ch * 2, ch * 4, 4, 2, 1), nn.BatchNorm2d(ch * 4), nn.LeakyReLU(0.2, True),
            nn.Conv2d(ch * 4, 1, 4, 1, 0),
        )

    def forward(self, x):
        return self.net(x).view(-1)


class GAN(L.LightningModule):
    def __init__(self, latent_dim=128, lr=2e-4, b1=0.5, b2=0.999):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = Generator(latent_dim)
        self.discriminator = Discriminator()
        self.register_buffer("fixed_z", torch.randn(64, latent_dim))

    def adversarial_loss(self, logits, is_real: bool):
        target = torch.ones_like(logits) if is_real else torch.zeros_like(logits)
        return F.binary_cross_entropy_with_logits(logits, target)

    def training_step(self, batch, batch_idx):
        g_opt, d_opt = self.optimizers()
        real, _ = batch
        z = torch.randn(real.size(0), self.hparams.latent_dim, device=self.device)

        fake = self.generator(z)
        d_real = self.discriminator(real)
        d_fake = self.discriminator(fake)
        d_loss = 0.5 * (self.adversarial_loss(d_real, True) + self.adversarial_loss(d_fake, False))
        self.manual_backward(d_loss)
        d_opt.step()

        g_opt.zero_grad()
        gen = self.generator(z)
        g_loss = self.adversarial_loss(self.discriminator(gen), True)
        self.manual_backward(g_loss)
        g_opt.step()

        self.log_dict({"d_loss": d_loss.detach(), "g_loss": g_loss.detach()}, prog_bar=True)

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self):
        samples = self.generator(self.fixed_z)
        grid = torchvision.utils.make_grid(samples, normalize=True, value_range=(-1, 1))
        if self.logger is not None and hasattr(self.logger.experiment, "add_image"):
            self.logger.experiment.add_image("samples", grid, self.current_epoch)

    def configure_optimizers(self):
        hp = self.hparams
        g_opt = torch.optim.Adam(self.generator.parameters(), lr=hp.lr, betas=(hp.b1, hp.b2))
        d_opt = torch.optim.Adam(self.discriminator.parameters(), lr=hp.lr, betas=(hp.b1, hp.b2))
        return [g_opt, d_opt], []
