"""Small Swin-style classifier (windowed self-attention with shifted windows) trained under CPU bf16 autocast on synthetic images."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class WindowAttention(nn.Module):
    def __init__(self, dim, heads, window, fp32_softmax=False):
        super().__init__()
        self.heads, self.window, self.fp32_softmax = heads, window, fp32_softmax
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.rel_bias = nn.Parameter(torch.zeros(heads, window * window, window * window))

    def _attend(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5 + self.rel_bias
        out = attn.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, n, d))

    def forward(self, x):
        if self.fp32_softmax:
            with torch.autocast("cpu", enabled=False):
                return self._attend(x.float())
        return self._attend(x)


class SwinBlock(nn.Module):
    def __init__(self, dim, heads, window, shift, fp32_softmax=False):
        super().__init__()
        self.window, self.shift = window, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, window, fp32_softmax)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        b, h, w, d = x.shape
        ws = self.window
        y = torch.roll(self.norm1(x), shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = y.view(b, h // ws, ws, w // ws, ws, d).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, d)
        y = self.attn(y)
        y = y.view(b, h // ws, w // ws, ws, ws, d).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, d)
        x = x + torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        return x + self.mlp(self.norm2(x))


class TinySwin(nn.Module):
    def __init__(self, dim=32, window=4, n_classes=4, fp32_block=None):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=2, stride=2)
        self.blocks = nn.ModuleList(
            SwinBlock(dim, 4, window, shift=(i % 2) * window // 2, fp32_softmax=(i == fp32_block))
            for i in range(2)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, images):
        x = self.patch_embed(images).permute(0, 2, 3, 1)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x.mean(dim=(1, 2))))


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--bug", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    # fp32 attention for the shifted block was a debugging switch for a NaN hunt
    model = TinySwin(dim=args.dim, fp32_block=1 if args.bug == "autocast-escape" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps):
        labels = torch.randint(0, 4, (args.batch_size,), generator=g)
        images = torch.randn(args.batch_size, 3, 16, 16, generator=g) * 0.5
        images += labels.view(-1, 1, 1, 1).float() * 0.25
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(images)
            loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    return model


if __name__ == "__main__":
    main()
