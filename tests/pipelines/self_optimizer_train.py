"""A GPT-style model that builds its own optimizer (nanoGPT's ``configure_optimizers``), with
decay and no-decay param groups; trained a few steps on seeded random tokens."""

import torch
from torch import nn


class GPTish(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict({"wte": nn.Embedding(10, 8), "h": nn.ModuleList([nn.Linear(8, 8)])})
        self.lm_head = nn.Linear(8, 10)

    def forward(self, idx):
        x = self.transformer["wte"](idx)
        for block in self.transformer["h"]:
            x = block(x)
        return self.lm_head(x)

    def configure_optimizers(self, lr):
        decay = [p for n, p in self.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.named_parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=lr)

torch.manual_seed(0)
model = GPTish()
optimizer = model.configure_optimizers(1e-3)
idx = torch.randint(0, 10, (4, 6))
for _ in range(3):
    logits = model(idx)
    loss = nn.functional.cross_entropy(logits.view(-1, 10), idx.view(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
