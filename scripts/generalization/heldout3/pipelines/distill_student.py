"""Knowledge distillation: a frozen wider teacher (eval mode, torch.no_grad) provides soft
targets; a small student is trained on temperature-scaled KL plus hard-label CE.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(d_in, width, n_out, p=0.0):
    return nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Dropout(p),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, n_out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--temperature", type=float, default=3.0)
    ap.add_argument("--kd-weight", type=float, default=0.7)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    teacher = mlp(12, 64, 6, p=0.3)
    student = mlp(12, 16, 6)
    # give the teacher a structured decision function: teacher = "pretrained"
    with torch.no_grad():
        teacher[0].weight.mul_(3.0)
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(student.parameters(), lr=args.lr)

    t = args.temperature
    student.train()
    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        x = torch.randn(32, 12, generator=gen)
        with torch.no_grad():
            t_logits = teacher(x)
        labels = t_logits.argmax(1)
        s_logits = student(x)
        kd = F.kl_div(F.log_softmax(s_logits / t, 1), F.log_softmax(t_logits / t, 1),
                      reduction="batchmean", log_target=True) * t * t
        loss = args.kd_weight * kd + (1 - args.kd_weight) * F.cross_entropy(s_logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
