"""A tiny MLP trained on synthetic data; options select the variants the tests need."""

import argparse
import functools
import json

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.backbone(x))


def closure_iteration(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                      bug: str) -> torch.Tensor:
    """One iteration's work, as the closure that ``optimizer.step(closure)`` evaluates."""
    if bug != "no-zero-grad":
        optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--freeze-backbone", action="store_true")
    parser.add_argument("--raise-at", type=int, default=-1)
    parser.add_argument("--sleep-per-step", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--optimizer", choices=["adam", "sgd", "lbfgs"], default="adam",
                        help="lbfgs: evaluates the closure up to --lbfgs-iters times per step")
    parser.add_argument("--closure", action="store_true",
                        help="run each iteration in a closure given to optimizer.step (implied by lbfgs; "
                             "no accumulation, no clipping)")
    parser.add_argument("--lbfgs-iters", type=int, default=3)
    parser.add_argument("--bug", choices=["none", "optimizer-over-frozen", "no-zero-grad", "double-init",
                                          "double-init-data"],
                        default="none")
    parser.add_argument("--init", choices=["default", "normal", "data-normal"], default="default",
                        help="data-normal: initialise through .data, as some _init_weights do")
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--clip", type=float, default=0.0, help="clip the grad norm to this before each step")
    parser.add_argument("--warmup", type=int, default=0,
                        help="ramp the learning rate linearly from 0 over this many steps")
    parser.add_argument("--zero-init-head", action="store_true",
                        help="start the output layer at zero (the backbone gets no grad at the first step)")
    parser.add_argument("--grads-to-zero", action="store_true",
                        help="zero_grad(set_to_none=False): zero the grads instead of dropping them")
    parser.add_argument("--print-every", type=int, default=0, help="print 'step N' every N steps")
    parser.add_argument("--zero-grad-at", choices=["start", "end"], default="start",
                        help="clear the grads at the top of each iteration or after its step")
    parser.add_argument("--zero-grad-via", choices=["optimizer", "model"], default="optimizer",
                        help="clear the grads with optimizer.zero_grad() or model.zero_grad()")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = MLP()
    if args.init != "default" or args.bug in ("double-init", "double-init-data"):
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if args.bug in ("double-init", "double-init-data"):  # an off-by-one: the first layer twice
            linears = [linears[0], *linears[:-1]]
        for layer in linears:
            if args.init == "data-normal" or args.bug == "double-init-data":
                layer.weight.data.normal_(mean=0.0, std=0.02)
            else:
                nn.init.normal_(layer.weight, std=0.02)
    if args.zero_init_head:
        nn.init.zeros_(model.head.weight)
        nn.init.zeros_(model.head.bias)
    if args.freeze_backbone or args.bug == "optimizer-over-frozen":
        for p in model.backbone.parameters():
            p.requires_grad_(False)
    # The bug: the optimizer gets the frozen backbone instead of the trainable head.
    trained = model.backbone if args.bug == "optimizer-over-frozen" else model.head if args.freeze_backbone else model
    if args.optimizer == "lbfgs":
        optimizer = torch.optim.LBFGS(trained.parameters(), lr=args.lr * 50, max_iter=args.lbfgs_iters)
    elif args.optimizer == "sgd" or args.freeze_backbone:
        optimizer = torch.optim.SGD(trained.parameters(), lr=args.lr * 10)
    else:
        optimizer = torch.optim.Adam(trained.parameters(), lr=args.lr)
    scheduler = None
    if args.warmup:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, step / args.warmup))
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(64, 16, generator=gen)
    y = torch.randint(0, 4, (64,), generator=gen)
    losses = []
    for step in range(args.steps):
        if step == args.raise_at:
            raise KeyError(f"user error at step {step}")
        model.train()
        if args.closure or args.optimizer == "lbfgs":
            # A partial, not a lambda: a lambda would make main's locals cells, which changes the
            # names the agent finds for the model in this frame.
            loss = optimizer.step(functools.partial(closure_iteration, model, optimizer, x, y, args.bug))
            losses.append(loss.item())
            continue
        if args.bug != "no-zero-grad" and args.zero_grad_at == "start":
            (optimizer if args.zero_grad_via == "optimizer" else model).zero_grad(set_to_none=not args.grads_to_zero)
        for micro in range(args.accumulate):
            part = slice(micro * len(x) // args.accumulate, (micro + 1) * len(x) // args.accumulate)
            loss = nn.functional.cross_entropy(model(x[part]), y[part]) / args.accumulate
            loss.backward()
        if args.clip:
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        if args.bug != "no-zero-grad" and args.zero_grad_at == "end":
            (optimizer if args.zero_grad_via == "optimizer" else model).zero_grad(set_to_none=not args.grads_to_zero)
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
        if args.print_every and step % args.print_every == 0:
            print(f"step {step}", flush=True)
        if args.sleep_per_step:
            import time

            print(f"step {step}", flush=True)
            time.sleep(args.sleep_per_step)
    model.eval()
    with torch.no_grad():
        model(x)
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
