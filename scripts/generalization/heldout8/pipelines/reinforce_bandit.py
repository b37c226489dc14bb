"""REINFORCE with a learned value baseline on a synthetic contextual bandit: shared trunk with policy and value heads,
entropy bonus, hand-rolled loss scaling (scale up, unscale grads), RMSprop, and skipped updates on degenerate batches."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class ActorCritic(nn.Module):
    def __init__(self, obs, acts, hidden):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(obs, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, acts)
        self.v = nn.Linear(hidden, 1)

    def forward(self, o):
        h = self.trunk(o)
        return self.pi(h), self.v(h).squeeze(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--entropy-coef", type=float, default=0.01)
    ap.add_argument("--loss-scale", type=float, default=128.0)
    ap.add_argument("--hidden", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 31)
    obs_dim, n_act = 6, 4
    arm_w = torch.randn(obs_dim, n_act, generator=g)
    agent = ActorCritic(obs_dim, n_act, args.hidden)
    opt = torch.optim.RMSprop([
        {"params": list(agent.trunk.parameters()) + list(agent.pi.parameters()), "lr": args.lr},
        {"params": agent.v.parameters(), "lr": 2 * args.lr},
    ], alpha=0.99, eps=1e-5)
    skipped = 0
    for step in range(args.steps):
        obs = torch.randn(args.episodes, obs_dim, generator=g)
        logits, value = agent(obs)
        dist = torch.distributions.Categorical(logits=logits)
        with torch.no_grad():
            u = torch.rand(args.episodes, generator=g)
            action = (dist.probs.cumsum(-1) < u[:, None]).sum(-1).clamp(max=n_act - 1)
            reward = (obs @ arm_w).gather(1, action[:, None]).squeeze(1) + 0.1 * torch.randn(args.episodes, generator=g)
        adv = reward - value.detach()
        if adv.std() < 1e-3:
            skipped += 1
            continue
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg_loss = -(dist.log_prob(action) * adv).mean()
        v_loss = F.mse_loss(value, reward)
        loss = pg_loss + 0.5 * v_loss - args.entropy_coef * dist.entropy().mean()
        opt.zero_grad()
        (loss * args.loss_scale).backward()
        finite = True
        for p in agent.parameters():
            if p.grad is not None:
                p.grad.div_(args.loss_scale)
                finite &= bool(torch.isfinite(p.grad).all())
        if finite:
            opt.step()
        else:
            skipped += 1
        print(f"step {step} loss {loss.item():.4f} mean_reward {reward.mean().item():.3f}")
    print(f"skipped {skipped}")


if __name__ == "__main__":
    main()
