"""Vanilla (non-saturating) GAN on a 2-D ring of Gaussians, DCGAN-example loop structure."""
import argparse
import math

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8, help="generator updates")
parser.add_argument("--seed", type=int, default=999)
parser.add_argument("--batchSize", type=int, default=64)
parser.add_argument("--nz", type=int, default=8)
parser.add_argument("--lrD", type=float, default=2e-3)
parser.add_argument("--lrG", type=float, default=2e-3)
parser.add_argument("--beta1", type=float, default=0.5)
parser.add_argument("--d_iters", type=int, default=1, help="discriminator updates per G update")
parser.add_argument("--zero_grad", choices=["module", "optimizer"], default="module")
opt = parser.parse_args()

torch.manual_seed(opt.seed)
real_label, fake_label = 1.0, 0.0


def sample_ring(n, g):
    k = torch.randint(0, 8, (n,), generator=g).float()
    a = 2 * math.pi * k / 8
    return torch.stack([2 * torch.cos(a), 2 * torch.sin(a)], 1) + 0.1 * torch.randn(n, 2, generator=g)


class Generator(nn.Module):
    def __init__(self, nz):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(nz, 64), nn.ReLU(True), nn.Linear(64, 64), nn.ReLU(True),
                                  nn.Linear(64, 2))

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2, inplace=True), nn.Linear(64, 64),
                                  nn.LeakyReLU(0.2, inplace=True), nn.Linear(64, 1), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1)


def weights_init(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.1)
        nn.init.zeros_(m.bias)


netG = Generator(opt.nz)
netG.apply(weights_init)
netD = Discriminator()
netD.apply(weights_init)
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=opt.lrD, betas=(opt.beta1, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=opt.lrG, betas=(opt.beta1, 0.999))
g_data = torch.Generator().manual_seed(opt.seed + 1)
fixed_noise = torch.randn(512, opt.nz, generator=torch.Generator().manual_seed(0))


def clear(net, optim):
    if opt.zero_grad == "module":
        net.zero_grad()
    else:
        optim.zero_grad()


for i in range(opt.steps):
    ############################
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    ###########################
    for _ in range(opt.d_iters):
        clear(netD, optimizerD)
        real = sample_ring(opt.batchSize, g_data)
        label = torch.full((opt.batchSize,), real_label)
        output = netD(real)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()

        noise = torch.randn(opt.batchSize, opt.nz, generator=g_data)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

    ############################
    # (2) Update G network: maximize log(D(G(z)))
    ###########################
    clear(netG, optimizerG)
    label.fill_(real_label)
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.mean().item()
    optimizerG.step()
    print(f'[{i}/{opt.steps}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f} D(x): {D_x:.4f} '
          f'D(G(z)): {D_G_z1:.4f} / {D_G_z2:.4f}')

with torch.no_grad():
    samples = netG(fixed_noise)
    ang = 2 * math.pi * torch.arange(8).float() / 8
    modes = torch.stack([2 * torch.cos(ang), 2 * torch.sin(ang)], 1)
    dist_to_mode = torch.cdist(samples, modes).min(1).values.mean().item()
print(f"mean_dist_to_nearest_mode={dist_to_mode:.4f}")
