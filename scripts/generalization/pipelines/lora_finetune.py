"""LoRA fine-tuning: the Linear layers of a (pretend-pretrained) MLP are wrapped with low-rank adapters; base
weights are frozen with requires_grad_(False), the B matrices start at zero, only adapter parameters go to
AdamW, and at the end the adapters are merged into the base weights and the merged model is checked."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank=4, alpha=8.0):
        super().__init__()
        self.base = base
        self.base.requires_grad_(False)
        self.scaling = alpha / rank
        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) / base.in_features ** 0.5)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling

    @torch.no_grad()
    def merged(self):
        lin = nn.Linear(self.base.in_features, self.base.out_features)
        lin.weight.copy_(self.base.weight + self.scaling * self.lora_B @ self.lora_A)
        lin.bias.copy_(self.base.bias)
        return lin


class BaseMLP(nn.Module):
    def __init__(self, d_in, hidden, d_out):
        super().__init__()
        self.up = nn.Linear(d_in, hidden)
        self.mid = nn.Linear(hidden, hidden)
        self.down = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.down(F.gelu(self.mid(F.gelu(self.up(x)))))


def add_lora(model, names, rank):
    for name in names:
        setattr(model, name, LoRALinear(getattr(model, name), rank=rank))
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rank", type=int, default=4)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    # downstream task: a linear-ish target the frozen base was not trained for
    w_task = torch.randn(16, 3, generator=gen) / 4
    x = torch.randn(512, 16, generator=gen)
    y = x @ w_task + 0.1 * torch.randn(512, 3, generator=gen)

    model = BaseMLP(16, 32, 3)
    model.requires_grad_(False)
    add_lora(model, ["up", "mid", "down"], args.rank)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0)

    model.train()
    for _step in range(args.steps):
        idx = torch.randint(0, len(x), (args.batch_size,), generator=gen)
        loss = F.mse_loss(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    model.eval()
    merged = BaseMLP(16, 32, 3)
    for name in ["up", "mid", "down"]:
        setattr(merged, name, getattr(model, name).merged())
    with torch.no_grad():
        gap = (merged(x[:64]) - model(x[:64])).abs().max().item()
    assert gap < 1e-4, gap
    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
