"""Neural-ODE-style dynamics model with fixed-step RK4 integration.

Learns the vector field of a damped Duffing oscillator from short observed
trajectories. The learned field f_theta(x, t) is integrated with a hand-written
RK4 stepper (backprop through the solver), and the loss compares predicted and
observed states along the trajectory. LR follows CosineAnnealingWarmRestarts
stepped with fractional epochs.
"""
import argparse

import torch
import torch.nn as nn


def duffing(x, alpha=-1.0, beta=1.0, delta=0.3):
    pos, vel = x[..., 0], x[..., 1]
    return torch.stack([vel, -delta * vel - alpha * pos - beta * pos ** 3], dim=-1)


def rk4_solve(f, x0, t_grid):
    xs = [x0]
    x = x0
    for i in range(len(t_grid) - 1):
        t, dt = t_grid[i], t_grid[i + 1] - t_grid[i]
        k1 = f(x, t)
        k2 = f(x + 0.5 * dt * k1, t + 0.5 * dt)
        k3 = f(x + 0.5 * dt * k2, t + 0.5 * dt)
        k4 = f(x + dt * k3, t + dt)
        x = x + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        xs.append(x)
    return torch.stack(xs, dim=1)  # (B, T, 2)


class VectorField(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 2))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, x, t):
        tt = torch.full_like(x[..., :1], float(t))
        return self.net(torch.cat([x, tt], dim=-1))


def make_trajectories(gen, batch_size, t_grid):
    x0 = torch.rand(batch_size, 2, generator=gen) * 3 - 1.5
    with torch.no_grad():
        traj = rk4_solve(lambda x, t: duffing(x), x0, t_grid)
    return x0, traj + 0.01 * torch.randn(traj.shape, generator=gen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--horizon", type=int, default=10, help="number of RK4 steps")
    ap.add_argument("--restart-period", type=int, default=3)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 9)
    t_grid = torch.linspace(0, 2.0, args.horizon + 1)
    field = VectorField(args.hidden)
    optimizer = torch.optim.Adam(field.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=args.restart_period,
                                                                     T_mult=2, eta_min=1e-4)

    field.train()
    for step in range(args.steps):
        x0, target = make_trajectories(gen, args.batch_size, t_grid)
        pred = rk4_solve(field, x0, t_grid)
        loss = (pred - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step(step + 1)
        print(f"step {step} loss {loss.item():.5f} lr {optimizer.param_groups[0]['lr']:.5f}")


if __name__ == "__main__":
    main()
