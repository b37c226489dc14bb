"""Top-1 gated mixture-of-experts regressor trained with DeepSpeed ZeRO stage 1 on CPU.

Single process (plain `python` launch): the script sets the torch.distributed
env vars itself and initialises DeepSpeed with the gloo backend. The model is
a hand-written switch-style MoE layer (softmax router, top-1 dispatch with a
capacity-free scatter, Switch load-balancing auxiliary loss) between an input
projection and an output head, on a piecewise synthetic regression task where
different input regions follow different functions. DeepSpeed wraps a client
AdamW optimizer with ZeRO-1 partitioning, gradient clipping and a WarmupLR
scheduler from the config.
"""
import argparse
import os
import socket

import torch
import torch.nn as nn
import torch.nn.functional as F


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SwitchMoE(nn.Module):
    def __init__(self, dim, hidden, n_experts):
        super().__init__()
        self.n_experts = n_experts
        self.router = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
                                      for _ in range(n_experts)])

    def forward(self, x):
        probs = self.router(x).softmax(-1)
        gate, idx = probs.max(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = idx == e
            if sel.any():
                out[sel] = expert(x[sel]) * gate[sel].unsqueeze(-1)
        # Switch Transformer load-balancing loss: n * sum_e f_e * P_e
        frac = F.one_hot(idx, self.n_experts).float().mean(0)
        aux = self.n_experts * (frac * probs.mean(0)).sum()
        return out, aux


class MoERegressor(nn.Module):
    def __init__(self, in_dim, dim, hidden, n_experts):
        super().__init__()
        self.inp = nn.Linear(in_dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.moe = SwitchMoE(dim, hidden, n_experts)
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        h = self.norm(self.inp(x))
        m, aux = self.moe(h)
        return self.head(h + m).squeeze(-1), aux


def make_batch(gen, batch_size, in_dim):
    x = torch.randn(batch_size, in_dim, generator=gen)
    region = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    funcs = torch.stack([x[:, 2].sin(), x[:, 3] ** 2, -x[:, 2] * x[:, 3], x[:, 4].abs()], 1)
    y = funcs.gather(1, region.unsqueeze(1)).squeeze(1)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--aux-weight", type=float, default=0.01)
    args = ap.parse_args()

    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))

    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(args.seed)
    in_dim = 6
    model = MoERegressor(in_dim, 16, 32, args.experts)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    ds_config = {
        "train_micro_batch_size_per_gpu": args.batch_size,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,
        "scheduler": {"type": "WarmupLR",
                      "params": {"warmup_min_lr": 0.0, "warmup_max_lr": args.lr, "warmup_num_steps": 3}},
        "steps_per_print": 1000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config)

    gen = torch.Generator().manual_seed(args.seed + 8)
    engine.train()
    for step in range(args.steps):
        x, y = make_batch(gen, args.batch_size, in_dim)
        pred, aux = engine(x)
        loss = F.mse_loss(pred, y) + args.aux_weight * aux
        engine.backward(loss)
        engine.step()
        print(f"step {step} loss {loss.item():.4f} aux {aux.item():.3f}")


if __name__ == "__main__":
    main()
