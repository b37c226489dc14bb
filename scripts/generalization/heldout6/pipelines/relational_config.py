"""Relational network (pairwise g_theta + f_phi) built from a config dataclass, HF-style, trained with RAdam
to answer 'are any two objects closer than a threshold'."""
import argparse
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class RNConfig:
    obj_dim: int = 4
    hidden_size: int = 32
    num_labels: int = 2
    dropout: float = 0.1
    initializer_range: float = 0.05


class RelationalNetwork(nn.Module):
    def __init__(self, config: RNConfig):
        super().__init__()
        self.config = config
        self.g = nn.Sequential(nn.Linear(2 * config.obj_dim, config.hidden_size), nn.ReLU(),
                               nn.Linear(config.hidden_size, config.hidden_size), nn.ReLU())
        self.f = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.ReLU(),
                               nn.Dropout(config.dropout), nn.Linear(config.hidden_size, config.num_labels))
        self.post_init()

    def post_init(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=self.config.initializer_range)
                nn.init.zeros_(m.bias)

    def forward(self, objects, labels=None):
        n = objects.shape[1]
        pairs = torch.cat([objects[:, :, None].expand(-1, -1, n, -1), objects[:, None].expand(-1, n, -1, -1)], -1)
        logits = self.f(self.g(pairs).sum((1, 2)))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = RelationalNetwork(RNConfig(hidden_size=args.hidden))
    opt = torch.optim.RAdam(model.parameters(), lr=args.lr)
    model.train()
    for step in range(args.steps):
        objs = torch.rand(args.batch_size, 5, 4, generator=gen)
        d = torch.cdist(objs[..., :2], objs[..., :2]) + torch.eye(5) * 10
        labels = (d.amin((1, 2)) < 0.15).long()
        out = model(objs, labels=labels)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        print(f"step {step} loss {out['loss'].item():.4f}")


if __name__ == "__main__":
    main()
