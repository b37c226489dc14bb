"""Inference only (no training): builds a small nn.TransformerEncoder classifier, puts it in eval mode and
scores --steps batches of synthetic sequences under torch.inference_mode(), reporting the mean loss and
accuracy against synthetic labels."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SequenceClassifier(nn.Module):
    def __init__(self, vocab, d_model, n_heads, n_layers, n_classes, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=2 * d_model, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.cls = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        h = self.tok(tokens) + self.pos[: tokens.size(1)]
        return self.cls(self.encoder(h).mean(1))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8, help="number of batches to score")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    vocab, seq_len, n_classes = 50, 12, 5
    model = SequenceClassifier(vocab, 32, 4, 2, n_classes, max_len=seq_len)
    model.eval()

    gen = torch.Generator().manual_seed(args.seed + 100)
    total_loss, correct, seen = 0.0, 0, 0
    with torch.inference_mode():
        for _batch_idx in range(args.steps):
            tokens = torch.randint(0, vocab, (args.batch_size, seq_len), generator=gen)
            labels = tokens[:, 0] % n_classes
            logits = model(tokens)
            total_loss += F.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(-1) == labels).sum().item()
            seen += labels.numel()

    print(f"accuracy {correct / seen:.3f}")
    print(f"final loss {total_loss / seen:.6f}")


if __name__ == "__main__":
    main()
