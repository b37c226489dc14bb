"""Fine-tunes a bag-of-tokens text classifier: the 'pretrained' encoder is frozen with requires_grad_(False)
and the classification head is re-initialised for a new label set; NAdam over the head only."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Encoder(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode="sum")
        self.norm = nn.LayerNorm(dim)
        self.mix = nn.Linear(dim, dim)

    def forward(self, tokens):
        return torch.tanh(self.mix(self.norm(self.bag(tokens))))


class Classifier(nn.Module):
    def __init__(self, vocab, dim, n_labels):
        super().__init__()
        self.encoder = Encoder(vocab, dim)
        self.head = nn.Linear(dim, n_labels)

    def forward(self, tokens):
        return self.head(self.encoder(tokens))


def load_pretrained(model, gen):
    """Stands in for loading a checkpoint: a deterministic synthetic state dict."""
    state = {k: torch.randn(v.shape, generator=gen) * 0.3 for k, v in model.state_dict().items()}
    state["encoder.norm.weight"] = torch.ones_like(state["encoder.norm.weight"])
    model.load_state_dict(state)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dim", type=int, default=24)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = Classifier(40, args.dim, 5)
    load_pretrained(model, gen)
    model.head = nn.Linear(args.dim, 3)  # new task: 3 labels
    model.encoder.requires_grad_(False)
    opt = torch.optim.NAdam([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    for step in range(args.steps):
        tokens = torch.randint(0, 40, (args.batch_size, 6), generator=gen)
        labels = (tokens[:, :2].sum(1) % 3)
        loss = F.cross_entropy(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
