"""2-rank DDP (gloo, CPU) time-series forecaster: conv1d encoder + linear forecasting head, Adam + LinearLR warmup.
Each rank draws its own shard of synthetic sine-mixture windows."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Forecaster(nn.Module):
    def __init__(self, window, horizon, ch):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(1, ch, 5, padding=2), nn.GELU(),
            nn.Conv1d(ch, ch, 5, padding=2, dilation=1), nn.GELU(),
        )
        self.head = nn.Linear(ch * window, horizon)

    def forward(self, x):
        return self.head(self.encoder(x.unsqueeze(1)).flatten(1))


def check_half_export(model):
    """Make sure the weights survive an fp16 round trip (the forecaster is shipped in half precision)."""
    model.half()
    with torch.no_grad():
        probe = model(torch.zeros(2, model.head.in_features // model.encoder[0].out_channels, dtype=torch.half))
    model.float()
    return bool(torch.isfinite(probe).all())


def windows(gen, bs, window, horizon):
    t = torch.arange(window + horizon).float()
    freq = torch.rand(bs, 1, generator=gen) * 0.5 + 0.1
    phase = torch.rand(bs, 1, generator=gen) * 6.28
    s = torch.sin(freq * t + phase) + 0.05 * torch.randn(bs, window + horizon, generator=gen)
    return s[:, :window], s[:, window:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--channels", type=int, default=8)
    ap.add_argument("--window", type=int, default=24)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed * 100 + rank)
    horizon = 6
    model = Forecaster(args.window, horizon, args.channels)
    ddp = DDP(model)
    if args.bug == "ddp-dtype-roundtrip":
        assert check_half_export(ddp.module)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.2, total_iters=3)
    for step in range(args.steps):
        x, y = windows(gen, args.batch_size, args.window, horizon)
        loss = F.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
    # replica consistency report
    with torch.no_grad():
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        other = flat.clone()
        dist.broadcast(other, 0)
        diff = (flat - other).abs().max().item()
    if rank == 1:
        print(f"max param diff vs rank0: {diff:.3e}")
    del ddp
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
