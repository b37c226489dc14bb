"""Bidirectional LSTM + additive attention pooling classifying synthetic event sequences.

The LSTM gets orthogonal recurrent weights and forget-gate bias 1 in its constructor; the
attention/classifier Linear layers are initialised by a small ``init_weights`` helper applied from
the training script. Adamax + MultiStepLR, step-counted loop over a DataLoader.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class SeqEncoder(nn.Module):
    def __init__(self, n_feat, hidden):
        super().__init__()
        self.lstm = nn.LSTM(n_feat, hidden, batch_first=True, bidirectional=True)
        for name, w in self.lstm.named_parameters():
            if "weight_hh" in name:
                for gate in w.chunk(4, 0):
                    nn.init.orthogonal_(gate)
            elif "weight_ih" in name:
                nn.init.xavier_uniform_(w)
            else:
                nn.init.zeros_(w)
                w.data[hidden:2 * hidden] = 1.0  # forget gate

    def forward(self, x):
        out, _ = self.lstm(x)
        return out


class AttnPool(nn.Module):
    def __init__(self, dim, att_dim):
        super().__init__()
        self.proj = nn.Linear(dim, att_dim)
        self.score = nn.Linear(att_dim, 1, bias=False)

    def forward(self, h):
        w = torch.softmax(self.score(torch.tanh(self.proj(h))), dim=1)
        return (w * h).sum(1)


class Classifier(nn.Module):
    def __init__(self, n_feat, hidden, n_classes):
        super().__init__()
        self.pool = AttnPool(2 * hidden, hidden)
        self.fc = nn.Linear(2 * hidden, n_classes)
        self.encoder = SeqEncoder(n_feat, hidden)

    def forward(self, x):
        return self.fc(self.pool(self.encoder(x)))


def init_weights(kinds):
    def _init(m):
        if "linear" in kinds and isinstance(m, nn.Linear):
            nn.init.kaiming_uniform_(m.weight, nonlinearity="tanh")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        if "rnn" in kinds and isinstance(m, nn.LSTM):
            for name, p in m.named_parameters():
                (nn.init.xavier_normal_ if "weight" in name else nn.init.zeros_)(p)
    return _init


def event_sequences(gen, n, length=20, n_feat=5, n_classes=3):
    y = torch.randint(0, n_classes, (n,), generator=gen)
    x = 0.5 * torch.randn(n, length, n_feat, generator=gen)
    pos = torch.randint(0, length, (n,), generator=gen)
    x[torch.arange(n), pos, y] += 3.0  # class-specific burst at a random time
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bug", choices=["double-init"], default=None)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--batch-size", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    x, y = event_sequences(g, 480)
    dl = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,
                    generator=torch.Generator().manual_seed(args.seed), drop_last=True)

    model = Classifier(5, args.hidden, 3)
    init_kinds = ("linear", "rnn") if args.bug == "double-init" else ("linear",)
    model.apply(init_weights(init_kinds))

    opt = torch.optim.Adamax(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[10, 20], gamma=0.3)
    state = {"step": 0, "losses": []}
    init_state = {k: v.clone() for k, v in model.state_dict().items()}

    while state["step"] < args.steps:
        for xb, yb in dl:
            logits = model(xb)
            loss = F.cross_entropy(logits, yb, label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            state["losses"].append(loss.item())
            print(f"step={state['step']} loss={loss.item():.4f}")
            state["step"] += 1
            if state["step"] >= args.steps:
                break
    if args.save:
        torch.save({"state": model.state_dict(), "losses": state["losses"], "init": init_state}, args.save)


if __name__ == "__main__":
    main()
