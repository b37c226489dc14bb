"""A tiny GPT-2 built from a config (nothing downloaded), trained by the HF ``Trainer`` on
seeded random tokens. ``--bug optimizer-over-blocks`` hands the Trainer a custom optimizer over
the transformer blocks only: the embeddings, the final norm and the tied head get grads that no
step applies."""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, 64, (n, 12), generator=gen)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--out", required=True, help="the Trainer's output directory (nothing is saved)")
    parser.add_argument("--accumulate", type=int, default=1, help="gradient accumulation steps")
    parser.add_argument("--warmup", type=int, default=0, help="warm-up steps of the linear schedule")
    parser.add_argument("--max-grad-norm", type=float, default=1.0, help="0 = no clipping")
    parser.add_argument("--bug", choices=["none", "optimizer-over-blocks"], default="none")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2))
    optimizers = (None, None)
    if args.bug == "optimizer-over-blocks":
        optimizers = (torch.optim.AdamW(model.transformer.h.parameters(), lr=args.lr), None)
    training = TrainingArguments(output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=4,
                                 learning_rate=args.lr, logging_steps=100, save_strategy="no", report_to=[],
                                 use_cpu=True, seed=args.seed,
                                 gradient_accumulation_steps=args.accumulate, warmup_steps=args.warmup,
                                 max_grad_norm=args.max_grad_norm, dataloader_num_workers=0, disable_tqdm=True)
    Trainer(model=model, args=training, train_dataset=Tokens(64, args.seed), optimizers=optimizers).train()


if __name__ == "__main__":
    main()
