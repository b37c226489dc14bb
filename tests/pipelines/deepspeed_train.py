"""DeepSpeed ZeRO stage 1 or 2 training on CPU ranks (gloo, started by torchrun).

A LayerNorm and two Linear layers trained by ``deepspeed.initialize`` with gradient clipping
and DeepSpeed's Adam (the torch implementation, so nothing is compiled). Each rank draws its own
batches (``--accumulate N`` micro-batches per step; ``--bf16``: bf16 weights, fp32 master
copies). ZeRO partitions the optimizer state (and with stage 2 the gradients) across the ranks
and all-gathers the updated weights, so the module's parameters are equal on every rank after
each step.

Bugs:
- ``weights-drift-on-one-rank``: after the third step the last rank adds noise to its copy of
  the weights (as a rank that loaded another checkpoint, or wrote into its weights, would); its
  next forward and backward already use them.
- ``no-clipping-on-one-rank``: the last rank reads a config without gradient clipping (as a
  rank given another config file would). ZeRO clips each rank's partition on its own rank, so
  that partition is updated unclipped, yet the all-gather leaves the weights equal everywhere.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from rank_exit import leave_process_group  # noqa: E402
from torch import nn  # noqa: E402


def _without_shared_memory_comm() -> None:
    """DeepSpeed's CPU communication backend compiles a shared-memory all-reduce for inference
    on first use (about a minute with g++); training never uses it."""
    import deepspeed.comm.torch  # noqa: F401

    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", type=int, choices=[1, 2], default=1)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--bf16", action="store_true", help="bf16 weights, fp32 master copies (DeepSpeed's BF16 mode)")
    parser.add_argument("--bug", choices=["none", "weights-drift-on-one-rank", "no-clipping-on-one-rank"], default="none")
    parser.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    args = parser.parse_args()
    _without_shared_memory_comm()
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": args.accumulate,
        "gradient_clipping": 0.0 if args.bug == "no-clipping-on-one-rank" and rank == world - 1 else 1.0,
        "zero_optimization": {"stage": args.stage},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
        "bf16": {"enabled": args.bf16},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    gen = torch.Generator().manual_seed(100 + 10 * args.seed + rank)  # each rank its own batches
    losses = []
    for step in range(args.steps):
        for _ in range(args.accumulate):  # engine.step() updates at the accumulation boundary only
            x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
            if args.bf16:
                x, y = x.bfloat16(), y.bfloat16()
            loss = nn.functional.mse_loss(engine(x), y)
            engine.backward(loss)
            engine.step()
        if args.bug == "weights-drift-on-one-rank" and rank == world - 1 and step == 2:
            with torch.no_grad():
                engine.module[1].weight.add_(0.01)
        losses.append(loss.item())
    # One write per line: the ranks share stdout, and print() writes the newline apart.
    sys.stdout.write(json.dumps({"rank": rank, "losses": losses}) + "\n")
    sys.stdout.flush()
    del engine, model
    leave_process_group()


if __name__ == "__main__":
    main()
