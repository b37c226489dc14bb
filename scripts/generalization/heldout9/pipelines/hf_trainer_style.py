"""A stripped-down HuggingFace-Trainer-like loop around a tiny BERT-ish sequence classifier."""
import argparse
import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Dataset


@dataclass
class TrainingArguments:
    max_steps: int = 8
    seed: int = 42
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 64
    gradient_accumulation_steps: int = 2
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    warmup_steps: int = 2
    lr_scheduler_type: str = "linear"   # linear | cosine | constant
    eval_steps: int = 4                 # 0 disables in-loop evaluation
    logging_steps: int = 1


def get_scheduler(name, optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        if name == "constant":
            return 1.0
        progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        if name == "cosine":
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
        return max(0.0, 1.0 - progress)
    return LambdaLR(optimizer, lr_lambda)


class ToyNLIDataset(Dataset):
    """Pairs of token spans; label = whether the second span repeats a token of the first."""

    def __init__(self, n, seed, vocab=40, max_len=16):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n):
            la, lb = (int(v) for v in torch.randint(3, 7, (2,), generator=g))
            a = torch.randint(3, vocab, (la,), generator=g)
            b = torch.randint(3, vocab, (lb,), generator=g)
            label = int(torch.rand((), generator=g) < 0.5)
            if label:
                b[int(torch.randint(0, lb, (), generator=g))] = a[int(torch.randint(0, la, (), generator=g))]
            label = int(bool(torch.isin(b, a).any()))
            ids = torch.cat([torch.tensor([1]), a, torch.tensor([2]), b, torch.tensor([2])])
            self.items.append((ids, label))
        self.max_len = max_len

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(batch, max_len=16):
    input_ids = torch.zeros(len(batch), max_len, dtype=torch.long)
    attention_mask = torch.zeros(len(batch), max_len, dtype=torch.long)
    for j, (ids, _) in enumerate(batch):
        input_ids[j, : len(ids)] = ids
        attention_mask[j, : len(ids)] = 1
    labels = torch.tensor([lab for _, lab in batch])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class TinyBertForSequenceClassification(nn.Module):
    def __init__(self, vocab=40, hidden=32, heads=2, layers=1, max_len=16, num_labels=2):
        super().__init__()
        self.embeddings = nn.ModuleDict({
            "word_embeddings": nn.Embedding(vocab, hidden, padding_idx=0),
            "position_embeddings": nn.Embedding(max_len, hidden),
            "LayerNorm": nn.LayerNorm(hidden, eps=1e-12),
        })
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.1,
                                           activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(hidden, num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        pos = torch.arange(input_ids.shape[1])
        h = self.embeddings["word_embeddings"](input_ids) + self.embeddings["position_embeddings"](pos)
        h = self.embeddings["LayerNorm"](h)
        h = self.encoder(h, src_key_padding_mask=attention_mask == 0)
        logits = self.classifier(self.dropout(self.pooler(h[:, 0])))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


class Trainer:
    def __init__(self, model, args: TrainingArguments, train_dataset, eval_dataset):
        self.model, self.args = model, args
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.optimizer, self.lr_scheduler = None, None

    def create_optimizer_and_scheduler(self, num_training_steps):
        no_decay = ["bias", "LayerNorm.weight", "norm1.weight", "norm2.weight"]
        groups = [
            {"params": [p for n, p in self.model.named_parameters() if not any(nd in n for nd in no_decay)],
             "weight_decay": self.args.weight_decay},
            {"params": [p for n, p in self.model.named_parameters() if any(nd in n for nd in no_decay)],
             "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(groups, lr=self.args.learning_rate, eps=self.args.adam_epsilon)
        self.lr_scheduler = get_scheduler(self.args.lr_scheduler_type, self.optimizer,
                                          self.args.warmup_steps, num_training_steps)

    def get_train_dataloader(self):
        g = torch.Generator().manual_seed(self.args.seed)
        return DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size,
                          shuffle=True, generator=g, collate_fn=collate, drop_last=True)

    def training_step(self, model, inputs):
        model.train()
        loss = model(**inputs)["loss"]
        if self.args.gradient_accumulation_steps > 1:
            loss = loss / self.args.gradient_accumulation_steps
        loss.backward()
        return loss.detach()

    def evaluate(self):
        dl = DataLoader(self.eval_dataset, batch_size=self.args.per_device_eval_batch_size, collate_fn=collate)
        self.model.eval()
        losses, correct, n = 0.0, 0, 0
        with torch.no_grad():
            for inputs in dl:
                out = self.model(**inputs)
                losses += out["loss"].item() * len(inputs["labels"])
                correct += (out["logits"].argmax(-1) == inputs["labels"]).sum().item()
                n += len(inputs["labels"])
        return {"eval_loss": losses / n, "eval_accuracy": correct / n}

    def train(self):
        args = self.args
        self.create_optimizer_and_scheduler(args.max_steps)
        model = self.model
        tr_loss = torch.tensor(0.0)
        global_step = 0
        model.zero_grad()
        epoch = 0
        while global_step < args.max_steps:
            for step, inputs in enumerate(self.get_train_dataloader()):
                tr_loss += self.training_step(model, inputs)
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                    self.optimizer.step()
                    self.lr_scheduler.step()
                    model.zero_grad()
                    global_step += 1
                    if global_step % args.logging_steps == 0:
                        print({"loss": round(tr_loss.item() / args.logging_steps, 4),
                               "learning_rate": self.lr_scheduler.get_last_lr()[0], "step": global_step})
                        tr_loss -= tr_loss
                    if args.eval_steps and global_step % args.eval_steps == 0:
                        print(self.evaluate())
                    if global_step >= args.max_steps:
                        break
            epoch += 1
        return global_step


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    for f in fields(TrainingArguments):
        if f.name in ("max_steps",):
            continue
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    ns = vars(p.parse_args())
    ns["max_steps"] = ns.pop("steps")
    return TrainingArguments(**ns)


if __name__ == "__main__":
    targs = parse()
    torch.manual_seed(targs.seed)
    model = TinyBertForSequenceClassification()
    trainer = Trainer(model, targs, ToyNLIDataset(160, seed=targs.seed), ToyNLIDataset(128, seed=10_000))
    trainer.train()
    metrics = trainer.evaluate()
    print(f"eval_loss={metrics['eval_loss']:.4f} eval_accuracy={metrics['eval_accuracy']:.4f}")
