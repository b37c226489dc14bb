"""Regression MLP with periodic checkpointing; optionally simulates a crash and resumes mid-run.

Checkpoints (model, optimizer, scheduler, step, RNG) live in a private temp dir.
"""
import argparse
import os
import tempfile

import torch
import torch.nn as nn


def build(args):
    model = nn.Sequential(
        nn.Linear(8, 32), nn.Tanh(),
        nn.Linear(32, 32), nn.Tanh(),
        nn.Linear(32, 2),
    )
    if args.optim == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.99))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr * 10, momentum=0.9, nesterov=True)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps, eta_min=args.lr * 0.1)
    return model, opt, sched


def target_fn(x):
    return torch.stack([torch.sin(x[:, 0] * 2) + x[:, 1] * x[:, 2], torch.cos(x[:, 3]) - 0.5 * x[:, 4]], 1)


def batch_for_step(seed, step, n):
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    x = torch.randn(n, 8, generator=g)
    return x, target_fn(x) + 0.05 * torch.randn(n, 2, generator=g)


def save_ckpt(path, step, model, opt, sched):
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "rng": torch.get_rng_state()}, path)


def load_ckpt(path, model, opt, sched):
    ck = torch.load(path, weights_only=False)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    sched.load_state_dict(ck["scheduler"])
    torch.set_rng_state(ck["rng"])
    return ck["step"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--optim", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--save-every", type=int, default=3)
    ap.add_argument("--resume-at", type=int, default=-1,
                    help="at this step throw away in-memory state and restore the latest checkpoint")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    model, opt, sched = build(args)
    loss_fn = nn.MSELoss()
    x_val, y_val = batch_for_step(args.seed + 1, 0, 512)

    with tempfile.TemporaryDirectory(prefix="ckpt_") as tmp:
        ckpt_path = os.path.join(tmp, "last.pt")
        step = 0
        resumed = False
        while step < args.steps:
            if step == args.resume_at and not resumed and os.path.exists(ckpt_path):
                del model, opt, sched
                model, opt, sched = build(args)
                step = load_ckpt(ckpt_path, model, opt, sched)
                resumed = True
                print(f"resumed from checkpoint at step {step}")
                continue
            model.train()
            x, y = batch_for_step(args.seed, step, args.batch)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            print(f"step {step - 1} loss {loss.item():.5f} lr {sched.get_last_lr()[0]:.5f}")
            if args.save_every and step % args.save_every == 0:
                save_ckpt(ckpt_path, step, model, opt, sched)

        model.eval()
        with torch.no_grad():
            val = loss_fn(model(x_val), y_val).item()
    print(f"val_mse: {val:.5f}")


if __name__ == "__main__":
    main()
