"""Trains a BERT-like encoder for sequence classification written in the HuggingFace style: a config
dataclass, a PreTrainedModel-like base with its own _init_weights applied once by post_init(), padded
inputs with an attention mask, AdamW and a linear warmup/decay schedule."""
import argparse
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class TinyBertConfig:
    vocab_size: int = 48
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 64
    max_position_embeddings: int = 24
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    num_labels: int = 3


class TinyBertPreTrainedModel(nn.Module):
    config_class = TinyBertConfig

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
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def post_init(self):
        self.apply(self._init_weights)


class TinyBertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.size(1), device=input_ids.device).unsqueeze(0)
        h = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(h))


class TinyBertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def _split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden, extended_mask):
        q, k, v = self._split(self.query(hidden)), self._split(self.key(hidden)), self._split(self.value(hidden))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + extended_mask
        probs = self.dropout(scores.softmax(-1))
        ctx = (probs @ v).transpose(1, 2).reshape(hidden.shape)
        return ctx


class TinyBertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = TinyBertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden, extended_mask):
        attn = self.dropout(self.attention_output(self.attention(hidden, extended_mask)))
        hidden = self.attention_norm(hidden + attn)
        ff = self.dropout(self.output(F.gelu(self.intermediate(hidden))))
        return self.output_norm(hidden + ff)


class TinyBertForSequenceClassification(TinyBertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embeddings = TinyBertEmbeddings(config)
        self.layer = nn.ModuleList([TinyBertLayer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask, labels=None):
        extended_mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        hidden = self.embeddings(input_ids)
        for layer in self.layer:
            hidden = layer(hidden, extended_mask)
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        logits = self.classifier(self.dropout(pooled))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


def make_examples(gen, n, config, max_len=20):
    ids = torch.randint(3, config.vocab_size, (n, max_len), generator=gen)
    lengths = torch.randint(6, max_len + 1, (n,), generator=gen)
    mask = (torch.arange(max_len)[None, :] < lengths[:, None]).long()
    ids = ids * mask  # pad with 0
    ids[:, 0] = 1  # [CLS]
    # label: bucket of the number of "high" tokens in the real part of the sequence
    high = ((ids >= config.vocab_size // 2) & mask.bool()).sum(1).float() / lengths
    labels = torch.bucketize(high, torch.tensor([0.4, 0.6]))
    return ids, mask, labels


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--warmup-steps", type=int, default=2)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    config = TinyBertConfig()
    ids, mask, labels = make_examples(torch.Generator().manual_seed(args.seed), 256, config)
    loader = DataLoader(TensorDataset(ids, mask, labels), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))

    model = TinyBertForSequenceClassification(config)
    no_decay = ("bias", "LayerNorm.weight", "attention_norm.weight", "output_norm.weight")
    grouped = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(grouped, lr=args.lr, eps=1e-8)

    def linear_schedule(step):
        if step < args.warmup_steps:
            return float(step + 1) / float(max(1, args.warmup_steps))
        return max(0.0, float(args.steps - step) / float(max(1, args.steps - args.warmup_steps)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule)

    step = 0
    loss = torch.tensor(float("nan"))
    model.train()
    while step < args.steps:
        for input_ids, attention_mask, y in loader:
            loss, _ = model(input_ids, attention_mask, labels=y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            if step >= args.steps:
                break

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
