"""2-rank DDP training of a top-1 mixture-of-experts classifier (find_unused_parameters=True).

Routing is hard top-1, so some experts receive no tokens on a given rank/step; an auxiliary
"spare" expert is never routed to at all (capacity reserved for later). The input embedding is a
frozen random projection (requires_grad=False). Adam with a StepLR schedule; labels from a teacher rule.
Launch: torchrun --nproc_per_node=2 ddp_moe_unused.py --steps 6
"""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Expert(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ff = nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d))

    def forward(self, x):
        return self.ff(x)


class MoEClassifier(nn.Module):
    def __init__(self, d_in, d, n_experts, n_classes, hidden):
        super().__init__()
        self.frozen_proj = nn.Linear(d_in, d)
        self.frozen_proj.requires_grad_(False)
        self.router = nn.Linear(d, n_experts)
        self.experts = nn.ModuleList(Expert(d, hidden) for _ in range(n_experts))
        self.spare_expert = Expert(d, hidden)  # not routed to yet
        self.cls = nn.Linear(d, n_classes)

    def forward(self, x):
        h = self.frozen_proj(x)
        gate = torch.softmax(self.router(h), -1)
        top_w, top_i = gate.max(-1)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            sel = top_i == e
            if sel.any():
                out[sel] = top_w[sel].unsqueeze(-1) * expert(h[sel])
        load = F.one_hot(top_i, gate.shape[-1]).float().mean(0)
        aux = gate.shape[-1] * (load * gate.mean(0)).sum()
        return self.cls(h + out), aux


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--experts", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=32)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = MoEClassifier(10, 16, args.experts, 3, args.hidden)
    ddp = DDP(model, find_unused_parameters=True)
    opt = torch.optim.Adam([p for p in ddp.parameters() if p.requires_grad], lr=args.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    teacher = torch.randn(10, 3, generator=torch.Generator().manual_seed(args.seed + 99))
    gen = torch.Generator().manual_seed(args.seed * 31 + rank)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 10, generator=gen)
        y = (x @ teacher).argmax(-1)
        logits, aux = ddp(x)
        loss = F.cross_entropy(logits, y) + 0.01 * aux
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} aux {aux.item():.3f}")
    vec = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    gathered = [torch.zeros_like(vec) for _ in range(world)]
    dist.all_gather(gathered, vec)
    if rank == 0:
        print(f"replica max diff {(gathered[0] - gathered[1]).abs().max().item():.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
