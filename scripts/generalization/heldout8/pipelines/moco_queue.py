"""MoCo-style contrastive pre-training on synthetic vectors: query encoder trained with InfoNCE against a
momentum key encoder (updated under no_grad, never by the optimizer) and a FIFO negative queue buffer;
SGD + CosineAnnealingWarmRestarts, BatchNorm in the projector."""
import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, d, h, out):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        self.projector = nn.Sequential(nn.Linear(h, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Linear(h, out))

    def forward(self, x):
        return F.normalize(self.projector(self.backbone(x)), dim=1)


class MoCo(nn.Module):
    def __init__(self, d, h, out, queue_size, m, tau):
        super().__init__()
        self.encoder_q = Encoder(d, h, out)
        self.encoder_k = copy.deepcopy(self.encoder_q).requires_grad_(False)
        self.register_buffer("queue", F.normalize(torch.randn(queue_size, out), dim=1))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.m, self.tau = m, tau

    @torch.no_grad()
    def _momentum_update(self):
        for pk, pq in zip(self.encoder_k.parameters(), self.encoder_q.parameters(), strict=True):
            pk.mul_(self.m).add_(pq.detach(), alpha=1 - self.m)

    @torch.no_grad()
    def _enqueue(self, k):
        n, p = k.size(0), int(self.ptr)
        idx = (torch.arange(n) + p) % self.queue.size(0)
        self.queue[idx] = k
        self.ptr.fill_((p + n) % self.queue.size(0))

    def forward(self, xq, xk):
        q = self.encoder_q(xq)
        with torch.no_grad():
            self._momentum_update()
            k = self.encoder_k(xk)
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ self.queue.clone().detach().t()
        logits = torch.cat([pos, neg], 1) / self.tau
        loss = F.cross_entropy(logits, torch.zeros(q.size(0), dtype=torch.long))
        self._enqueue(k)
        return loss


def augment(x, g):
    return x * (1 + 0.1 * torch.randn(x.shape, generator=g)) + 0.1 * torch.randn(x.shape, generator=g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--queue", type=int, default=128)
    ap.add_argument("--momentum-enc", type=float, default=0.99)
    ap.add_argument("--temperature", type=float, default=0.2)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 12)
    model = MoCo(16, 32, 8, args.queue, args.momentum_enc, args.temperature)
    opt = torch.optim.SGD(model.encoder_q.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=4, T_mult=1, eta_min=1e-4)
    protos = torch.randn(10, 16, generator=g)
    model.train()
    for step in range(args.steps):
        x = protos[torch.randint(0, 10, (args.batch_size,), generator=g)] + 0.3 * torch.randn(args.batch_size, 16, generator=g)
        loss = model(augment(x, g), augment(x, g))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        print(f"step {step} infonce {loss.item():.4f} queue_ptr {int(model.ptr)}")


if __name__ == "__main__":
    main()
