"""Gradual unfreezing (ULMFiT-style) of a conv text encoder on a toy topic-classification task.

Stage 1: only the classifier trains.  Stage 2 (step >= --unfreeze-at): the encoder
joins with a discriminative (smaller) learning rate.  The embedding can be held
frozen for the first --freeze-embedding-steps steps independently.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, N_TOPICS, SEQ = 80, 4, 24


class ConvEncoder(nn.Module):
    def __init__(self, emb=24, ch=32):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, emb)
        self.conv = nn.Conv1d(emb, ch, kernel_size=3, padding=1)
        self.norm = nn.BatchNorm1d(ch)

    def forward(self, tokens):
        h = self.embedding(tokens).transpose(1, 2)
        h = F.relu(self.norm(self.conv(h)))
        return h.max(dim=2).values


class TopicModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = ConvEncoder()
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, N_TOPICS))

    def forward(self, tokens):
        return self.classifier(self.encoder(tokens))


def topic_batch(g, n):
    topics = torch.randint(0, N_TOPICS, (n,), generator=g)
    # each topic owns a band of 10 "keywords"; the rest is background
    bg = torch.randint(40, VOCAB, (n, SEQ), generator=g)
    kw = topics[:, None] * 10 + torch.randint(0, 10, (n, SEQ), generator=g)
    use_kw = torch.rand(n, SEQ, generator=g) < 0.25
    return torch.where(use_kw, kw, bg), topics


def set_trainable(module, flag):
    for p in module.parameters():
        p.requires_grad_(flag)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--encoder-lr-mult", type=float, default=0.3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--unfreeze-at", type=int, default=3)
    ap.add_argument("--freeze-embedding-steps", type=int, default=-1,
                    help="-1: embedding follows the encoder schedule")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    model = TopicModel()
    # pretend-pretrained encoder: deterministic weights independent of the run seed
    with torch.random.fork_rng():
        torch.manual_seed(2020)
        model.encoder.load_state_dict(ConvEncoder().state_dict())

    enc_body = [p for n, p in model.encoder.named_parameters() if not n.startswith("embedding")]
    groups = [
        {"params": list(model.classifier.parameters()), "lr": args.lr},
        {"params": enc_body, "lr": args.lr * args.encoder_lr_mult},
        {"params": list(model.encoder.embedding.parameters()), "lr": args.lr * args.encoder_lr_mult},
    ]
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=args.lr, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(groups, lr=args.lr, momentum=0.9)

    g = torch.Generator().manual_seed(args.seed + 17)
    emb_frozen_until = args.unfreeze_at if args.freeze_embedding_steps < 0 else args.freeze_embedding_steps
    for step in range(args.steps):
        encoder_on = step >= args.unfreeze_at
        set_trainable(model.encoder, encoder_on)
        set_trainable(model.encoder.embedding, step >= emb_frozen_until)
        # frozen BN should not update its running statistics either
        model.train()
        if not encoder_on:
            model.encoder.norm.eval()

        x, y = topic_batch(g, args.batch_size)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        print(f"step {step} loss {loss.item():.4f} trainable={n_train}")

    model.eval()
    xv, yv = topic_batch(torch.Generator().manual_seed(5), 256)
    with torch.no_grad():
        logits = model(xv)
    print(f"val_acc {(logits.argmax(1) == yv).float().mean().item():.4f} "
          f"val_loss {F.cross_entropy(logits, yv).item():.4f}")


if __name__ == "__main__":
    main()
