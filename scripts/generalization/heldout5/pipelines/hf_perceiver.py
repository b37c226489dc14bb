"""HF-style Perceiver classifier (latent array cross-attending to inputs) built from a config dataclass, trained with gradient accumulation and linear warmup/decay."""
import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class PerceiverConfig:
    input_dim: int = 5
    d_latent: int = 32
    num_latents: int = 8
    num_heads: int = 4
    num_self_layers: int = 1
    num_labels: int = 3
    initializer_range: float = 0.02


class PerceiverPreTrainedModel(nn.Module):
    config_class = PerceiverConfig

    def __init__(self, config):
        super().__init__()
        self.config = config

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def post_init(self):
        self.apply(self._init_weights)


class PerceiverForSequenceClassification(PerceiverPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        d = config.d_latent
        self.input_proj = nn.Linear(config.input_dim, d)
        self.latents = nn.Parameter(torch.randn(config.num_latents, d) * 0.02)
        self.cross_attn = nn.MultiheadAttention(d, config.num_heads, batch_first=True)
        self.cross_ln = nn.LayerNorm(d)
        self.self_layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d, config.num_heads, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(config.num_self_layers)
        )
        self.classifier = nn.Linear(d, config.num_labels)
        self.post_init()

    def forward(self, inputs, labels=None):
        kv = self.input_proj(inputs)
        lat = self.latents.expand(inputs.shape[0], -1, -1)
        lat = lat + self.cross_attn(self.cross_ln(lat), kv, kv, need_weights=False)[0]
        for layer in self.self_layers:
            lat = layer(lat)
        logits = self.classifier(lat.mean(dim=1))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    config = PerceiverConfig()
    model = PerceiverForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    def lr_lambda(step):
        if step < args.warmup:
            return (step + 1) / args.warmup
        return max(0.0, (args.steps - step) / max(1, args.steps - args.warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    g = torch.Generator().manual_seed(args.seed)
    model.train()
    for step in range(args.steps):
        optimizer.zero_grad()
        total = 0.0
        for _ in range(args.grad_accum):
            inputs = torch.randn(args.batch_size, 10, config.input_dim, generator=g)
            labels = (inputs[:, :, 0].mean(1) * 4).long().clamp(-1, 1) + 1
            out = model(inputs, labels=labels)
            (out["loss"] / args.grad_accum).backward()
            total += out["loss"].item() / args.grad_accum
        optimizer.step()
        scheduler.step()
        print(f"step {step} loss {total:.4f} lr {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
