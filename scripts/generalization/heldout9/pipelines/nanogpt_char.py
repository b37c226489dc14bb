"""
Tiny nanoGPT-style training script on a synthetic character stream.
Config values can be overridden with --key=value style flags (argparse here).
"""
import argparse
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 27
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        print(f"num decayed parameter tensors: {len(decay_params)}, "
              f"num non-decayed parameter tensors: {len(nodecay_params)}")
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


def make_corpus(seed, n_chars=20000, vocab=27):
    """Order-2 Markov chain over 27 symbols with a few strongly preferred transitions."""
    g = torch.Generator().manual_seed(seed)
    trans = torch.rand(vocab, vocab, vocab, generator=g) ** 6
    trans = trans / trans.sum(-1, keepdim=True)
    data = torch.empty(n_chars, dtype=torch.long)
    data[0], data[1] = 0, 1
    u = torch.rand(n_chars, generator=g)
    cdf = trans.cumsum(-1)
    for i in range(2, n_chars):
        data[i] = torch.searchsorted(cdf[data[i - 2], data[i - 1]], u[i]).clamp(max=vocab - 1)
    return data


p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8, help="max_iters")
p.add_argument("--seed", type=int, default=1337)
p.add_argument("--batch_size", type=int, default=8)
p.add_argument("--block_size", type=int, default=16)
p.add_argument("--gradient_accumulation_steps", type=int, default=2)
p.add_argument("--learning_rate", type=float, default=3e-3)
p.add_argument("--min_lr", type=float, default=3e-4)
p.add_argument("--warmup_iters", type=int, default=2)
p.add_argument("--decay_lr", type=int, default=1)
p.add_argument("--weight_decay", type=float, default=0.1)
p.add_argument("--grad_clip", type=float, default=1.0)
p.add_argument("--eval_interval", type=int, default=4)
p.add_argument("--eval_iters", type=int, default=4)
p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
args = p.parse_args()

max_iters = args.steps
lr_decay_iters = max_iters
torch.manual_seed(args.seed)
data = make_corpus(seed=4242)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]
ctx = nullcontext() if args.dtype == "float32" else torch.autocast("cpu", dtype=torch.bfloat16)


def get_batch(split):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - args.block_size, (args.batch_size,))
    x = torch.stack([d[i:i + args.block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + args.block_size] for i in ix])
    return x, y


model = GPT(GPTConfig(block_size=args.block_size))
optimizer = model.configure_optimizers(args.weight_decay, args.learning_rate, (0.9, 0.95))


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(args.eval_iters)
        for k in range(args.eval_iters):
            X, Y = get_batch(split)
            with ctx:
                _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


def get_lr(it):
    if it < args.warmup_iters:
        return args.learning_rate * (it + 1) / (args.warmup_iters + 1)
    if it > lr_decay_iters:
        return args.min_lr
    decay_ratio = (it - args.warmup_iters) / (lr_decay_iters - args.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return args.min_lr + coeff * (args.learning_rate - args.min_lr)


X, Y = get_batch("train")
t0 = time.time()
iter_num = 0
while True:
    lr = get_lr(iter_num) if args.decay_lr else args.learning_rate
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr

    if args.eval_interval and iter_num % args.eval_interval == 0 and iter_num > 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")

    for _micro_step in range(args.gradient_accumulation_steps):
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / args.gradient_accumulation_steps
        X, Y = get_batch("train")
        loss.backward()
    if args.grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

    dt = time.time() - t0
    t0 = time.time()
    lossf = loss.item() * args.gradient_accumulation_steps
    print(f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}")
    iter_num += 1
    if iter_num >= max_iters:
        break

losses = estimate_loss()
print(f"final val loss {losses['val']:.4f}")
