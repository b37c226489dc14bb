"""Trains a small MLP-Mixer sequence classifier under torch.autocast("cpu", dtype=torch.bfloat16) with Adam.
Bug `autocast-escape`: the channel MLP of the last mixer block is built with upcast=True, i.e. it disables
autocast and casts its input to float32, so that layer silently computes in fp32 inside the bf16 region."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class TokenMLP(nn.Module):
    def __init__(self, seq_len, hidden):
        super().__init__()
        self.fc1 = nn.Linear(seq_len, hidden)
        self.fc2 = nn.Linear(hidden, seq_len)

    def forward(self, x):  # x: (B, L, D) -> mix along L
        y = x.transpose(1, 2)
        y = self.fc2(F.gelu(self.fc1(y)))
        return y.transpose(1, 2)


class ChannelMLP(nn.Module):
    def __init__(self, dim, hidden, upcast=False):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.upcast = upcast

    def forward(self, x):
        if self.upcast:
            with torch.autocast("cpu", enabled=False):
                x = x.float()
                return self.fc2(F.gelu(self.fc1(x)))
        return self.fc2(F.gelu(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self, seq_len, dim, upcast_channel_mlp=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = TokenMLP(seq_len, 32)
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = ChannelMLP(dim, 2 * dim, upcast=upcast_channel_mlp)

    def forward(self, x):
        x = x + self.token_mlp(self.norm1(x))
        return x + self.channel_mlp(self.norm2(x))


class MixerClassifier(nn.Module):
    def __init__(self, vocab, seq_len, dim, depth, n_classes, upcast_last=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([
            MixerBlock(seq_len, dim, upcast_channel_mlp=(upcast_last and i == depth - 1)) for i in range(depth)
        ])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(1))


def make_data(gen, n, vocab, seq_len):
    tokens = torch.randint(0, vocab, (n, seq_len), generator=gen)
    # label: which quarter of the vocabulary is most frequent in the first half of the sequence
    counts = F.one_hot(tokens[:, : seq_len // 2] * 4 // vocab, 4).sum(1)
    return tokens, counts.argmax(-1)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--bug", choices=["none", "autocast-escape"], default="none")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    vocab, seq_len = 32, 16
    tokens, labels = make_data(torch.Generator().manual_seed(args.seed), 512, vocab, seq_len)

    model = MixerClassifier(vocab, seq_len, 32, depth=2, n_classes=4,
                            upcast_last=(args.bug == "autocast-escape"))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    perm_gen = torch.Generator().manual_seed(args.seed + 1)
    model.train()
    for _step in range(args.steps):
        idx = torch.randint(0, len(tokens), (args.batch_size,), generator=perm_gen)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens[idx])
            loss = F.cross_entropy(logits, labels[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    print(f"final loss {loss.float().item():.6f}")


if __name__ == "__main__":
    main()
