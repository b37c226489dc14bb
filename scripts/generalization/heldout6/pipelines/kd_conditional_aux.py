"""Knowledge distillation of a frozen random-feature teacher into a small 1-D conv student; the student has an
auxiliary reconstruction head that is only used (and so only receives gradients) on even steps. The teacher is
switched to eval and the student back to train every step."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class ConvNet(nn.Module):
    def __init__(self, ch, n_classes, in_len):
        super().__init__()
        self.features = nn.Sequential(nn.Conv1d(1, ch, 5, padding=2), nn.ReLU(), nn.Dropout(0.1),
                                      nn.Conv1d(ch, ch, 5, padding=2), nn.ReLU())
        self.cls = nn.Linear(ch, n_classes)
        self.aux = nn.Linear(ch, in_len)

    def forward(self, x, with_aux=False):
        h = self.features(x).mean(-1)
        logits = self.cls(h)
        return (logits, self.aux(h)) if with_aux else logits


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--temperature", type=float, default=2.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    teacher = ConvNet(32, 4, 24).requires_grad_(False)
    student = ConvNet(8, 4, 24)
    opt = torch.optim.Adam(student.parameters(), lr=args.lr)
    for step in range(args.steps):
        teacher.eval()
        student.train()
        x = torch.randn(args.batch_size, 1, 24, generator=gen)
        with torch.no_grad():
            soft = (teacher(x) / args.temperature).softmax(-1)
        use_aux = step % 2 == 0
        if use_aux:
            logits, recon = student(x, with_aux=True)
            aux_loss = F.mse_loss(recon, x.squeeze(1))
        else:
            logits, aux_loss = student(x), torch.zeros(())
        kd = F.kl_div((logits / args.temperature).log_softmax(-1), soft, reduction="batchmean")
        loss = kd * args.temperature ** 2 + 0.1 * aux_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} kd {kd.item():.4f} aux {aux_loss.item():.4f}")


if __name__ == "__main__":
    main()
