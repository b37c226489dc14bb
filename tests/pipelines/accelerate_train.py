"""A tiny Accelerate training loop (CPU), launched plainly or with torchrun.

``--accumulate N`` accumulates gradients over N batches with ``accelerator.accumulate``: the
wrapped optimizer's ``step`` and ``zero_grad`` do nothing until the N-th batch.
``--bug zero-grad-first`` calls ``zero_grad`` at the top of the loop body instead of after the
step: with accumulation it runs only on the N-th batch, before its backward, so it throws away
the gradients of the batches before it, and the first batch of each step starts from the stale
gradients of the last step.
``--bug grads-scaled-on-one-process`` makes the last process double its gradients after the
backward of its third batch (after DDP averaged them, as a rank-local loss scale would): its
gradients, then its weights, differ from the other process's.
"""

import argparse
import contextlib
import json
import sys

import torch
from accelerate import Accelerator
from rank_exit import leave_process_group
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=4, help="batches per process")
    parser.add_argument("--bug", choices=["none", "zero-grad-first", "grads-scaled-on-one-process"], default="none")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.accumulate)
    torch.manual_seed(args.seed)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(3 + args.seed)
    samples = 16 * args.batches * accelerator.num_processes
    data = torch.utils.data.TensorDataset(torch.randn(samples, 8, generator=gen), torch.randn(samples, 2, generator=gen))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    net, opt, loader = accelerator.prepare(net, opt, loader)
    losses = []
    last = accelerator.process_index == accelerator.num_processes - 1
    for batch, (x, y) in enumerate(loader):
        with accelerator.accumulate(net) if args.accumulate > 1 else contextlib.nullcontext():
            if args.bug == "zero-grad-first":
                opt.zero_grad()
            loss = nn.functional.mse_loss(net(x), y)
            accelerator.backward(loss)
            if args.bug == "grads-scaled-on-one-process" and last and batch == 2:
                with torch.no_grad():
                    for p in net.parameters():
                        p.grad.mul_(2.0)
            opt.step()
            if args.bug != "zero-grad-first":
                opt.zero_grad()
        losses.append(loss.item())
    # One write per line: the ranks share stdout, and print() writes the newline apart.
    sys.stdout.write(json.dumps({"rank": accelerator.process_index, "losses": losses}) + "\n")
    sys.stdout.flush()
    if torch.distributed.is_initialized():
        accelerator.free_memory()
        del accelerator, net, opt, loader
        leave_process_group()


if __name__ == "__main__":
    main()
