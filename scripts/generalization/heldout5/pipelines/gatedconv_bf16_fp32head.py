"""Gated convolutional (GLU) sequence classifier trained under CPU bf16 autocast, with the classification head deliberately always run in float32."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class GLUConvBlock(nn.Module):
    def __init__(self, dim, k):
        super().__init__()
        self.conv = nn.Conv1d(dim, 2 * dim, k, padding=k - 1)

    def forward(self, x):
        h = self.conv(x)[..., : x.shape[-1]]  # causal crop
        return x + F.glu(h, dim=1)


class GatedConvClassifier(nn.Module):
    def __init__(self, vocab, dim, n_classes):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(GLUConvBlock(dim, 3), GLUConvBlock(dim, 3))
        self.head = nn.Linear(dim, n_classes)

    def forward(self, tokens):
        h = self.blocks(self.embed(tokens).transpose(1, 2)).amax(dim=-1)
        with torch.autocast("cpu", enabled=False):  # numerically sensitive head kept in fp32 by design
            return self.head(h.float())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dim", type=int, default=24)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = GatedConvClassifier(64, args.dim, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps):
        tokens = torch.randint(0, 64, (args.batch_size, 16), generator=g)
        labels = (tokens == 7).any(1).long() + (tokens == 9).any(1).long()
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f} logits_dtype {logits.dtype}")


if __name__ == "__main__":
    main()
