"""Knowledge distillation from a frozen teacher into a small student (1-D signal classification).

Synthetic multi-channel sensor windows (activity-recognition style) with class
dependent frequencies. A larger teacher network is restored from an
(in-memory) checkpoint, then frozen with requires_grad_(False) and put in eval
mode. The student shares the teacher's (frozen) input normalisation layer and
is trained on a mix of hard-label cross entropy and temperature-scaled KL to
the teacher's soft targets.
"""
import argparse
import io
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

N_CLASSES = 4


def make_batch(gen, batch_size, channels=3, length=32):
    labels = torch.randint(0, N_CLASSES, (batch_size,), generator=gen)
    t = torch.linspace(0, 1, length)
    freq = (1.0 + labels.float() * 1.5)[:, None, None]
    phase = 2 * math.pi * torch.rand(batch_size, channels, 1, generator=gen)
    x = torch.sin(2 * math.pi * freq * t + phase) + 0.4 * torch.randn(batch_size, channels, length, generator=gen)
    return x, labels


class SignalNet(nn.Module):
    def __init__(self, channels, width, depth, input_norm=None):
        super().__init__()
        self.input_norm = input_norm if input_norm is not None else nn.BatchNorm1d(channels)
        layers, cin = [], channels
        for _ in range(depth):
            layers += [nn.Conv1d(cin, width, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2)]
            cin = width
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(width, N_CLASSES)

    def forward(self, x):
        h = self.features(self.input_norm(x))
        return self.fc(h.mean(-1))


def distillation_loss(student_logits, teacher_logits, labels, temperature, alpha):
    soft = F.kl_div(F.log_softmax(student_logits / temperature, -1), F.softmax(teacher_logits / temperature, -1),
                    reduction="batchmean") * temperature ** 2
    hard = F.cross_entropy(student_logits, labels)
    return alpha * soft + (1 - alpha) * hard


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=2.0)
    ap.add_argument("--alpha", type=float, default=0.7)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 21)

    buffer = io.BytesIO()
    torch.save(SignalNet(3, 32, 3).state_dict(), buffer)  # stands in for a pretrained checkpoint file
    buffer.seek(0)
    teacher = SignalNet(3, 32, 3)
    teacher.load_state_dict(torch.load(buffer, weights_only=True))
    teacher.eval()
    teacher.requires_grad_(False)

    student = SignalNet(3, 8, 2, input_norm=teacher.input_norm)  # reuse frozen normalisation stats
    trainable = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=args.lr)

    student.train()
    student.input_norm.eval()  # shared with the frozen teacher: keep running stats fixed
    for step in range(args.steps):
        x, y = make_batch(gen, args.batch_size)
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits = student(x)
        loss = distillation_loss(s_logits, t_logits, y, args.temperature, args.alpha)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        agree = (s_logits.argmax(-1) == t_logits.argmax(-1)).float().mean().item()
        print(f"step {step} loss {loss.item():.4f} teacher-agreement {agree:.2f}")


if __name__ == "__main__":
    main()
