"""Simulated tensor parallelism on CPU ranks (gloo, started by torchrun), optionally beside
data parallelism.

A replicated LayerNorm (marked ``tensor_model_parallel=False``, as Megatron marks parameters it
does not split) and a sharded Linear (``tensor_model_parallel=True``: each rank of a
tensor-parallel group holds its own shard). With ``--tp N`` (default: the whole world) the
ranks form groups of N consecutive ranks (tensor parallel) and groups of ranks N apart (data
parallel), made with ``new_group`` as Megatron-style set-ups do: ranks of one tensor-parallel
group load the same batches (``--mesh``: the groups come from a 2-D DeviceMesh instead) (a ``DistributedSampler`` over the data-parallel ranks), data-parallel
groups different ones. Replicated grads are averaged
over the world and shard grads over the data-parallel group, so replicas stay equal.

Bugs:
- ``clip-on-one-rank`` clips the replicated grads on rank 0 only: the BLOOM-176B failure, where
  replicated LayerNorm weights drift apart across tensor-parallel ranks;
- ``unscaled-shard-grad`` (needs data parallelism): the last rank forgets to divide its shard
  grads by the data-parallel size, so its shard drifts from its data-parallel replica;
- ``sampler-by-global-rank`` (needs data parallelism): the sampler is given the global rank and
  world size, so the ranks of a tensor-parallel group load different batches.
"""

import argparse
import json
import sys

import torch
import torch.distributed as dist
from rank_exit import leave_process_group
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--tp", type=int, default=0, help="tensor-parallel size (0: the whole world)")
    parser.add_argument("--mesh", action="store_true", help="make the groups with init_device_mesh")
    parser.add_argument("--unmarked", action="store_true",
                        help="no tensor_model_parallel / partition_dim attributes on the parameters")
    parser.add_argument("--bug", choices=["none", "clip-on-one-rank", "unscaled-shard-grad", "sampler-by-global-rank"], default="none")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = args.tp or world
    dp = world // tp
    tp_rank, dp_rank = rank % tp, rank // tp
    dp_group = None
    if dp > 1 and args.mesh:
        from torch.distributed.device_mesh import init_device_mesh

        dp_group = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp")).get_group("dp")
    elif dp > 1:
        # Every rank creates every group, in the same order (new_group requires it); nothing here
        # communicates within a tensor-parallel group, but the layout has them.
        for d in range(dp):
            dist.new_group(list(range(d * tp, (d + 1) * tp)))
        dp_group = [dist.new_group(list(range(t, world, tp))) for t in range(tp)][tp_rank]

    torch.manual_seed(0)
    norm = nn.LayerNorm(16)
    torch.manual_seed(100 + tp_rank)  # each tensor-parallel rank's shard is different
    shard = nn.Linear(16, 8)
    model = nn.Sequential(norm, shard)
    for p in norm.parameters() if not args.unmarked else ():
        p.tensor_model_parallel = False
    for p in shard.parameters() if not args.unmarked else ():
        p.tensor_model_parallel = True
        p.partition_dim = 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(args.steps * 32 * world, 16, generator=torch.Generator().manual_seed(7)))
    by_global_rank = args.bug == "sampler-by-global-rank"
    sampler = DistributedSampler(data, num_replicas=world if by_global_rank else dp,
                                 rank=rank if by_global_rank else dp_rank, shuffle=False)
    losses = []
    for (x,), _ in zip(DataLoader(data, batch_size=32, sampler=sampler), range(args.steps), strict=False):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        for p in norm.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        if dp_group is not None:
            for p in shard.parameters():
                dist.all_reduce(p.grad, group=dp_group)
                if not (args.bug == "unscaled-shard-grad" and rank == world - 1):
                    p.grad /= dp
        if args.bug == "clip-on-one-rank" and rank == 0:
            torch.nn.utils.clip_grad_norm_(norm.parameters(), 1e-3)
        optimizer.step()
        losses.append(loss.item())
    # One write per line: the ranks share stdout, and print() writes the newline apart.
    sys.stdout.write(json.dumps({"rank": rank, "losses": losses}) + "\n")
    sys.stdout.flush()
    del model, optimizer, norm, shard
    leave_process_group()


if __name__ == "__main__":
    main()
