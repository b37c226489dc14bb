"""Shared trunk + per-task heads; each step trains on ONE task, so the other heads get no grad.

An auxiliary reconstruction decoder is only used on every `--aux-every`-th step.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

TASKS = ("cls", "reg", "rank")


class MultiTaskNet(nn.Module):
    def __init__(self, d_in=20, d=48):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d_in, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.heads = nn.ModuleDict({
            "cls": nn.Linear(d, 3),
            "reg": nn.Sequential(nn.Linear(d, d // 2), nn.ReLU(), nn.Linear(d // 2, 1)),
            "rank": nn.Linear(d, 1, bias=False),
        })
        self.aux_decoder = nn.Linear(d, d_in)

    def forward(self, x, task, with_aux=False):
        z = self.trunk(x)
        out = self.heads[task](z)
        return (out, self.aux_decoder(z)) if with_aux else (out, None)


class TaskSampler:
    def __init__(self, seed, schedule):
        self.g = torch.Generator().manual_seed(seed)
        self.schedule = schedule
        w = torch.randn(20, 4, generator=torch.Generator().manual_seed(3))
        self.w = w

    def task_for(self, step):
        if self.schedule == "round_robin":
            return TASKS[step % len(TASKS)]
        return TASKS[int(torch.randint(0, len(TASKS), (1,), generator=self.g))]

    def batch(self, task, n):
        x = torch.randn(n, 20, generator=self.g)
        s = x @ self.w
        if task == "cls":
            return x, s[:, :3].argmax(1)
        if task == "reg":
            return x, torch.tanh(s[:, 3:4])
        # pairwise ranking: second half vs first half
        return x, (s[: n // 2, 3] > s[n // 2:, 3]).float()


def task_loss(task, out, y):
    if task == "cls":
        return F.cross_entropy(out, y)
    if task == "reg":
        return F.mse_loss(out, y)
    n = out.shape[0] // 2
    return F.binary_cross_entropy_with_logits(out[:n, 0] - out[n:, 0], y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--schedule", choices=["round_robin", "random"], default="round_robin")
    ap.add_argument("--aux-every", type=int, default=2)
    ap.add_argument("--aux-weight", type=float, default=0.1)
    ap.add_argument("--set-to-none", type=int, default=1)
    ap.add_argument("--zero-grad-at", choices=["top", "after"], default="after")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    net = MultiTaskNet()
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    sampler = TaskSampler(args.seed + 1, args.schedule)
    history = {t: [] for t in TASKS}

    for step in range(args.steps):
        if args.zero_grad_at == "top":
            opt.zero_grad(set_to_none=bool(args.set_to_none))
        task = sampler.task_for(step)
        x, y = sampler.batch(task, args.batch)
        use_aux = args.aux_every > 0 and step % args.aux_every == 0
        out, recon = net(x, task, with_aux=use_aux)
        loss = task_loss(task, out, y)
        if recon is not None:
            loss = loss + args.aux_weight * F.mse_loss(recon, x)
        loss.backward()
        opt.step()
        if args.zero_grad_at == "after":
            opt.zero_grad(set_to_none=bool(args.set_to_none))
        history[task].append(loss.item())
        print(f"step {step} task={task:<4s} aux={int(use_aux)} loss={loss.item():.4f}")

    net.eval()
    evals = {}
    with torch.no_grad():
        ev = TaskSampler(777, "round_robin")
        for t in TASKS:
            x, y = ev.batch(t, 256)
            evals[t] = task_loss(t, net(x, t)[0], y).item()
    print("eval " + " ".join(f"{k}={v:.4f}" for k, v in evals.items()) +
          f" mean={sum(evals.values()) / len(evals):.4f}")


if __name__ == "__main__":
    main()
