"""2-rank DeepSpeed ZeRO stage-1 training (CPU, gloo, torchrun) of a small MLP classifier with a
torch.optim.AdamW optimizer handed to deepspeed.initialize; each rank draws its own synthetic batches and
uses engine.backward / engine.step."""
import argparse
import os

import deepspeed
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class MLPClassifier(nn.Module):
    def __init__(self, d_in=20, hidden=48, n_classes=4):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x):
        return self.net(x)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=16, help="micro batch per rank")
    p.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    args = p.parse_args()

    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    model = MLPClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    ds_config = {
        "train_micro_batch_size_per_gpu": args.batch_size,
        "gradient_accumulation_steps": 1,
        "train_batch_size": args.batch_size * world,
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10_000,
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config)

    gen = torch.Generator().manual_seed(1000 * args.seed + rank)
    centers = torch.randn(4, 20, generator=torch.Generator().manual_seed(args.seed)) * 1.5
    engine.train()
    for _step in range(args.steps):
        y = torch.randint(0, 4, (args.batch_size,), generator=gen)
        x = centers[y] + torch.randn(args.batch_size, 20, generator=gen)
        loss = F.cross_entropy(engine(x), y)
        engine.backward(loss)
        engine.step()

    logged = loss.detach().clone()
    dist.all_reduce(logged)
    if rank == 0:
        print(f"final loss {logged.item() / world:.6f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
