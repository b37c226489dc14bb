"""Fine-tuning a 'pretrained' 1D-conv sensor backbone (weights loaded from an in-memory checkpoint) with the backbone frozen and a re-initialised classification head."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SensorNet(nn.Module):
    def __init__(self, channels, n_classes):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv1d(3, channels, 5, padding=2), nn.GroupNorm(4, channels), nn.GELU(),
            nn.Conv1d(channels, channels, 3, padding=1, dilation=1), nn.GroupNorm(4, channels), nn.GELU(),
            nn.AdaptiveMaxPool1d(1), nn.Flatten(),
        )
        self.head = nn.Linear(channels, n_classes)

    def forward(self, x):
        return self.head(self.backbone(x))


def pretrained_checkpoint(channels, seed):
    torch.manual_seed(seed + 1234)
    return SensorNet(channels, n_classes=10).state_dict()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--num-classes", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    channels = 16
    state = pretrained_checkpoint(channels, args.seed)
    torch.manual_seed(args.seed)
    model = SensorNet(channels, args.num_classes)
    backbone_state = {k: v for k, v in state.items() if not k.startswith("head.")}
    missing, unexpected = model.load_state_dict(backbone_state, strict=False)
    assert set(missing) == {"head.weight", "head.bias"} and not unexpected
    model.head.reset_parameters()
    model.backbone.requires_grad_(False)
    model.backbone.eval()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=args.lr, momentum=0.9)
    g = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps):
        labels = torch.randint(0, args.num_classes, (args.batch_size,), generator=g)
        t = torch.linspace(0, 1, 32)
        x = torch.sin(6.28 * (labels.view(-1, 1, 1) + 1) * t) + 0.3 * torch.randn(args.batch_size, 3, 32, generator=g)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
