"""HF-style token-classification model (NER-like tagging) built from a config dataclass.

Mimics the transformers layout: a `TaggerConfig` dataclass, a
`TaggerPreTrainedModel` base with `_init_weights` / `post_init` /
`save_pretrained` / `from_pretrained`, a `TaggerModel` encoder and a
`TaggerForTokenClassification` head returning a ModelOutput-like dataclass
with `.loss` and `.logits`. Labels use -100 on padding. The model is saved and
re-loaded from a temporary directory before fine-tuning with AdamW and a
linear warm-up/decay schedule.
"""
import argparse
import json
import os
import tempfile
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TaggerConfig:
    vocab_size: int = 40
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 64
    max_position_embeddings: int = 16
    num_labels: int = 5
    hidden_dropout_prob: float = 0.1
    initializer_range: float = 0.02
    pad_token_id: int = 0


@dataclass
class TokenClassifierOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor


class TaggerPreTrainedModel(nn.Module):
    config_class = TaggerConfig

    def __init__(self, config):
        super().__init__()
        self.config = config

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()

    def post_init(self):
        self.apply(self._init_weights)

    def save_pretrained(self, path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(asdict(self.config), f)
        torch.save(self.state_dict(), os.path.join(path, "pytorch_model.bin"))

    @classmethod
    def from_pretrained(cls, path, **overrides):
        with open(os.path.join(path, "config.json")) as f:
            config = cls.config_class(**{**json.load(f), **overrides})
        model = cls(config)
        state = torch.load(os.path.join(path, "pytorch_model.bin"), weights_only=True)
        model.load_state_dict(state)
        return model


class TaggerLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = nn.MultiheadAttention(config.hidden_size, config.num_attention_heads,
                                               dropout=config.hidden_dropout_prob, batch_first=True)
        self.attention_norm = nn.LayerNorm(config.hidden_size)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden, key_padding_mask):
        attn, _ = self.attention(hidden, hidden, hidden, key_padding_mask=key_padding_mask, need_weights=False)
        hidden = self.attention_norm(hidden + self.dropout(attn))
        ff = self.output(F.gelu(self.intermediate(hidden)))
        return self.output_norm(hidden + self.dropout(ff))


class TaggerModel(TaggerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.embeddings_norm = nn.LayerNorm(config.hidden_size)
        self.layers = nn.ModuleList([TaggerLayer(config) for _ in range(config.num_hidden_layers)])
        self.post_init()

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        hidden = self.embeddings_norm(self.word_embeddings(input_ids) + self.position_embeddings(pos))
        for layer in self.layers:
            hidden = layer(hidden, key_padding_mask=attention_mask == 0)
        return hidden


class TaggerForTokenClassification(TaggerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.tagger = TaggerModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask, labels=None):
        logits = self.classifier(self.dropout(self.tagger(input_ids, attention_mask)))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.config.num_labels), labels.view(-1), ignore_index=-100)
        return TokenClassifierOutput(loss=loss, logits=logits)


def make_batch(gen, config, batch_size, seq_len):
    lengths = torch.randint(4, seq_len + 1, (batch_size,), generator=gen)
    ids = torch.randint(1, config.vocab_size, (batch_size, seq_len), generator=gen)
    mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    # entity tag depends on the token id bucket and on whether the previous token was an "entity"
    labels = (ids * 7 % config.num_labels)
    labels[:, 1:] = torch.where(ids[:, :-1] % 5 == 0, labels[:, 1:], (labels[:, 1:] + 1) % config.num_labels)
    labels = labels.masked_fill(mask == 0, -100)
    return ids, mask, labels


def linear_warmup_decay(warmup, total):
    def fn(step):
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return fn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--hidden-size", type=int, default=32)
    ap.add_argument("--warmup-steps", type=int, default=2)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    config = TaggerConfig(hidden_size=args.hidden_size, intermediate_size=2 * args.hidden_size)
    base = TaggerForTokenClassification(config)
    with tempfile.TemporaryDirectory() as tmp:
        base.save_pretrained(tmp)
        model = TaggerForTokenClassification.from_pretrained(tmp, hidden_dropout_prob=0.05)

    no_decay = ("bias", "norm.weight", "embeddings_norm.weight")
    grouped = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(grouped, lr=args.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_warmup_decay(args.warmup_steps, args.steps))

    gen = torch.Generator().manual_seed(args.seed + 11)
    model.train()
    for step in range(args.steps):
        ids, mask, labels = make_batch(gen, config, args.batch_size, config.max_position_embeddings)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        print(f"step {step} loss {out.loss.item():.4f} lr {scheduler.get_last_lr()[0]:.5f}")


if __name__ == "__main__":
    main()
