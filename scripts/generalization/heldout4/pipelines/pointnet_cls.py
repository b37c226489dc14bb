"""PointNet-style point-cloud classifier on synthetic shapes.

Point clouds are sampled from spheres, cubes, cylinders and cones (random
scale, rotation about z and jitter). A shared per-point MLP lifts each point,
a symmetric max-pool gives a global feature and a dropout-regularised MLP head
classifies. A validation pass runs every --eval-every steps.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

N_CLASSES = 4


def sample_shape(gen, kind, n_points):
    u = torch.rand(n_points, 3, generator=gen)
    if kind == 0:  # sphere surface
        v = torch.randn(n_points, 3, generator=gen)
        pts = v / v.norm(dim=1, keepdim=True)
    elif kind == 1:  # cube surface
        pts = u * 2 - 1
        face = torch.randint(0, 3, (n_points,), generator=gen)
        sign = torch.where(torch.rand(n_points, generator=gen) < 0.5, -1.0, 1.0)
        pts[torch.arange(n_points), face] = sign
    elif kind == 2:  # cylinder
        theta = 2 * math.pi * u[:, 0]
        pts = torch.stack([theta.cos(), theta.sin(), u[:, 1] * 2 - 1], 1)
    else:  # cone
        theta = 2 * math.pi * u[:, 0]
        h = u[:, 1]
        pts = torch.stack([(1 - h) * theta.cos(), (1 - h) * theta.sin(), h * 2 - 1], 1)
    angle = 2 * math.pi * float(torch.rand(1, generator=gen))
    rot = torch.tensor([[math.cos(angle), -math.sin(angle), 0.0],
                        [math.sin(angle), math.cos(angle), 0.0],
                        [0.0, 0.0, 1.0]])
    scale = 0.7 + 0.6 * float(torch.rand(1, generator=gen))
    return scale * pts @ rot.T + 0.02 * torch.randn(n_points, 3, generator=gen)


def make_batch(gen, batch_size, n_points):
    labels = torch.randint(0, N_CLASSES, (batch_size,), generator=gen)
    clouds = torch.stack([sample_shape(gen, int(k), n_points) for k in labels])
    return clouds, labels


class PointNet(nn.Module):
    def __init__(self, hidden=64, dropout=0.3):
        super().__init__()
        self.point_mlp = nn.Sequential(
            nn.Linear(3, hidden // 2), nn.LayerNorm(hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, hidden), nn.LayerNorm(hidden), nn.ReLU(),
        )
        self.head = nn.Sequential(
            nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden // 2, hidden // 4), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden // 4, N_CLASSES),
        )

    def forward(self, clouds):
        feats = self.point_mlp(clouds)          # (B, N, H)
        global_feat = feats.max(dim=1).values    # permutation invariant
        return self.head(global_feat)


@torch.no_grad()
def evaluate(model, clouds, labels, restore_mode=True):
    was_training = model.training
    model.eval()
    logits = model(clouds)
    acc = (logits.argmax(-1) == labels).float().mean().item()
    loss = F.cross_entropy(logits, labels).item()
    if restore_mode:
        model.train(was_training)
    return loss, acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--points", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--eval-every", type=int, default=3)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 77)
    val_clouds, val_labels = make_batch(gen, 32, args.points)

    model = PointNet(args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)

    model.train()
    for step in range(args.steps):
        clouds, labels = make_batch(gen, args.batch_size, args.points)
        loss = F.cross_entropy(model(clouds), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} loss {loss.item():.4f}")
        if (step + 1) % args.eval_every == 0:
            vloss, vacc = evaluate(model, val_clouds, val_labels,
                                   restore_mode=(args.bug != "dropout-in-eval"))
            print(f"  val loss {vloss:.4f} acc {vacc:.2f}")


if __name__ == "__main__":
    main()
