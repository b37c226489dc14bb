"""2-rank DDP (gloo, torchrun) training of an MLP regressor with LayerNorm on sharded synthetic tabular data.
Bug `ddp-dtype-roundtrip`: after wrapping, the module is cast to bf16 and back to fp32, which swaps the
parameter tensors under DDP's hooks, so grads are no longer all-reduced and the replicas drift apart."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class TabularRegressor(nn.Module):
    def __init__(self, n_features=12, hidden=32):
        super().__init__()
        self.inp = nn.Linear(n_features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.hidden = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        h = F.silu(self.norm(self.inp(x)))
        h = h + F.silu(self.hidden(h))
        return self.out(h).squeeze(-1)


def make_dataset(seed, n=512, n_features=12):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, n_features, generator=gen)
    w = torch.randn(n_features, generator=gen)
    y = torch.tanh(x @ w / 3.0) + 0.1 * x[:, 0] * x[:, 1] + 0.05 * torch.randn(n, generator=gen)
    return TensorDataset(x, y)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--bug", choices=["none", "ddp-dtype-roundtrip"], default="none")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    dataset = make_dataset(args.seed)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    model = TabularRegressor()
    ddp_model = DDP(model)
    if args.bug == "ddp-dtype-roundtrip":
        # round-trip through bf16 "to match the half-precision checkpoint format"
        ddp_model.module.to(torch.bfloat16)
        ddp_model.module.to(torch.float32)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9)

    step, epoch = 0, 0
    loss = torch.tensor(float("nan"))
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            pred = ddp_model(x)
            loss = F.mse_loss(pred, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step >= args.steps:
                break
        epoch += 1

    reduced = loss.detach().clone()
    dist.all_reduce(reduced)
    if rank == 0:
        print(f"final loss {reduced.item() / world:.6f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
