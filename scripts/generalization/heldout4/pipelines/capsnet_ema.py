"""Capsule network with dynamic routing-by-agreement on synthetic glyphs.

8x8 "glyph" images are noisy renderings of one of five stroke patterns at a
random offset. Primary capsules come from a strided conv, class capsules are
computed by 3 iterations of dynamic routing, and the capsule lengths are
trained with the margin loss. The optimizer uses parameter groups (no weight
decay for biases / routing-free parameters) and an exponential moving average
of the weights is kept for evaluation.
"""
import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

N_CLASSES = 5


def make_templates():
    t = torch.zeros(N_CLASSES, 6, 6)
    t[0, :, 2:4] = 1            # vertical bar
    t[1, 2:4, :] = 1            # horizontal bar
    t[2] = torch.eye(6)         # diagonal
    t[3] = torch.eye(6).flip(1)  # anti-diagonal
    t[4, 1:5, 1] = t[4, 1:5, 4] = t[4, 1, 1:5] = t[4, 4, 1:5] = 1  # box
    return t


def make_batch(gen, templates, batch_size):
    labels = torch.randint(0, N_CLASSES, (batch_size,), generator=gen)
    imgs = 0.2 * torch.rand(batch_size, 1, 8, 8, generator=gen)
    offs = torch.randint(0, 3, (batch_size, 2), generator=gen)
    for i in range(batch_size):
        oy, ox = offs[i].tolist()
        imgs[i, 0, oy:oy + 6, ox:ox + 6] += templates[labels[i]]
    return imgs, labels


def squash(s, dim=-1):
    n2 = (s ** 2).sum(dim, keepdim=True)
    return n2 / (1 + n2) * s / (n2.sqrt() + 1e-8)


class CapsNet(nn.Module):
    def __init__(self, conv_ch=16, prim_caps=8, prim_dim=4, class_dim=8, routing_iters=3):
        super().__init__()
        self.prim_dim, self.iters = prim_dim, routing_iters
        self.conv = nn.Conv2d(1, conv_ch, 3)                       # 8 -> 6
        self.primary = nn.Conv2d(conv_ch, prim_caps * prim_dim, 3, stride=2)  # 6 -> 2
        n_in = prim_caps * 2 * 2
        self.W = nn.Parameter(0.05 * torch.randn(1, n_in, N_CLASSES, class_dim, prim_dim))

    def forward(self, x):
        h = F.relu(self.conv(x))
        u = self.primary(h)                                # (B, caps*dim, 2, 2)
        b = u.shape[0]
        u = u.view(b, -1, self.prim_dim, 2, 2).permute(0, 1, 3, 4, 2).reshape(b, -1, self.prim_dim)
        u = squash(u)
        u_hat = (self.W @ u[:, :, None, :, None]).squeeze(-1)   # (B, n_in, C, class_dim)
        logits = torch.zeros(b, u_hat.shape[1], N_CLASSES)
        for it in range(self.iters):
            c = logits.softmax(dim=2)
            v = squash((c.unsqueeze(-1) * u_hat).sum(1))         # (B, C, class_dim)
            if it < self.iters - 1:
                logits = logits + (u_hat * v.unsqueeze(1)).sum(-1)
        return v.norm(dim=-1)


def margin_loss(lengths, labels, m_pos=0.9, m_neg=0.1, lam=0.5):
    t = F.one_hot(labels, N_CLASSES).float()
    loss = t * F.relu(m_pos - lengths) ** 2 + lam * (1 - t) * F.relu(lengths - m_neg) ** 2
    return loss.sum(1).mean()


class EMA:
    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = copy.deepcopy(model).eval()
        for p in self.shadow.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for ema_p, p in zip(self.shadow.parameters(), model.parameters(), strict=False):
            ema_p.lerp_(p.detach(), 1 - self.decay)


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--ema-decay", type=float, default=0.9)
    ap.add_argument("--routing-iters", type=int, default=3)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 3)
    templates = make_templates()
    model = CapsNet(routing_iters=args.routing_iters)
    optimizer = torch.optim.AdamW(param_groups(model, 5e-4), lr=args.lr)
    ema = EMA(model, args.ema_decay)

    model.train()
    for step in range(args.steps):
        imgs, labels = make_batch(gen, templates, args.batch_size)
        lengths = model(imgs)
        loss = margin_loss(lengths, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ema.update(model)
        acc = (lengths.argmax(1) == labels).float().mean().item()
        print(f"step {step} loss {loss.item():.4f} acc {acc:.2f}")

    imgs, labels = make_batch(gen, templates, 64)
    with torch.no_grad():
        ema_acc = (ema.shadow(imgs).argmax(1) == labels).float().mean().item()
    print(f"ema eval acc {ema_acc:.2f}")


if __name__ == "__main__":
    main()
