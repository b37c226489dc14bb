"""nn.TransformerEncoder sequence labeller (predict running max of digits) with OneCycleLR."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class RunningMaxTagger(nn.Module):
    def __init__(self, vocab=10, d_model=32, nhead=4, layers=2, max_len=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        enc_layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=64, dropout=0.1,
                                               batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, num_layers=layers, enable_nested_tensor=False)
        self.out = nn.Linear(d_model, vocab)

    def forward(self, x):
        T = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        h = self.embed(x) + self.pos(torch.arange(T))
        return self.out(self.encoder(h, mask=mask, is_causal=True))


def make_batch(g, bsz, seq_len):
    x = torch.randint(0, 10, (bsz, seq_len), generator=g)
    return x, torch.cummax(x, dim=1).values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-lr", type=float, default=5e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=12)
    ap.add_argument("--scheduler", choices=["onecycle", "cosine", "none"], default="onecycle")
    ap.add_argument("--eval-every", type=int, default=4)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    model = RunningMaxTagger()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.max_lr)
    if args.scheduler == "onecycle":
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.max_lr,
                                                        total_steps=args.steps, pct_start=0.3)
    elif args.scheduler == "cosine":
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    else:
        scheduler = None

    g = torch.Generator().manual_seed(args.seed + 3)
    gv = torch.Generator().manual_seed(31337)
    xv, yv = make_batch(gv, 128, args.seq_len)

    def evaluate():
        model.eval()
        with torch.no_grad():
            logits = model(xv)
            loss = F.cross_entropy(logits.reshape(-1, 10), yv.reshape(-1)).item()
            acc = (logits.argmax(-1) == yv).float().mean().item()
        model.train()
        return loss, acc

    model.train()
    for step in range(args.steps):
        x, y = make_batch(g, args.batch_size, args.seq_len)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, 10), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        line = f"step {step:3d} | loss {loss.item():.4f} | lr {optimizer.param_groups[0]['lr']:.2e}"
        if args.eval_every and (step + 1) % args.eval_every == 0:
            vl, va = evaluate()
            line += f" | val {vl:.4f} acc {va:.3f}"
        print(line)

    vl, va = evaluate()
    print(f"final: val_loss={vl:.4f} val_acc={va:.4f}")


if __name__ == "__main__":
    main()
