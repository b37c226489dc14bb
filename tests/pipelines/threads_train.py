"""Training with several Python threads calling wrapped torch APIs at once, and a DataLoader
with forked workers created in the middle of the run, while those threads are still training.

Prints one JSON line: the losses of a deterministic single-threaded part (which must not change
under the agent), and the thread ids of the training threads.
"""

import argparse
import json
import threading

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                steps: int, skip_zero_grad: bool = False) -> list[float]:
    losses = []
    for _ in range(steps):
        if not skip_zero_grad:
            opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def deterministic_part(steps: int) -> list[float]:
    model = make_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=gen), torch.randint(0, 2, (32,), generator=gen)
    return train_steps(model, opt, x, y, steps)


class Noisy(TensorDataset):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return nn.functional.dropout(x, 0.0, training=False), y  # a wrapped API in the worker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--bug", choices=["none", "no-zero-grad"], default="none")
    args = parser.parse_args()
    torch.set_num_threads(1)

    losses = deterministic_part(5)

    idents: dict[str, int] = {}
    errors: list[str] = []
    started = threading.Barrier(args.threads + 1)
    shared = make_model(7)
    shared_opt = torch.optim.SGD(shared.parameters(), lr=0.01)
    shared_lock = threading.Lock()
    # Seeded here, not in the threads: torch.manual_seed holds a lock of torch's for a while, and
    # a worker forked while another thread holds it would wait for it forever (with or without
    # the agent).
    own = {k: make_model(10 + k) for k in range(0, args.threads, 2)}

    def worker(k: int) -> None:
        try:
            idents[f"worker{k}"] = threading.get_ident()
            gen = torch.Generator().manual_seed(100 + k)
            x, y = torch.randn(16, 8, generator=gen), torch.randint(0, 2, (16,), generator=gen)
            started.wait(timeout=60)
            if k % 2 == 0:  # its own model
                model = own[k]
                opt = torch.optim.Adam(model.parameters(), lr=1e-3)
                train_steps(model, opt, x, y, args.steps, skip_zero_grad=args.bug == "no-zero-grad")
            else:  # one model shared by the odd threads (a lock keeps each step whole)
                for _ in range(args.steps):
                    with shared_lock:
                        train_steps(shared, shared_opt, x, y, 1)
        except Exception as exc:  # reported by the main thread
            errors.append(f"worker{k}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(k,), name=f"worker{k}") for k in range(args.threads)]
    for t in threads:
        t.start()
    started.wait(timeout=60)

    # Mid-run, while the threads train: a DataLoader whose workers are forked now.
    ds = Noisy(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(ds, batch_size=16, num_workers=2, multiprocessing_context="fork")
    model = make_model(3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = 0
    for _ in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            batches += 1

    for t in threads:
        t.join(timeout=120)
    alive = [t.name for t in threads if t.is_alive()]
    if errors or alive:
        raise SystemExit(f"thread failures: {errors} still running: {alive}")
    print(json.dumps({"losses": losses, "threads": idents, "main": threading.get_ident(),
                      "batches": batches}))


if __name__ == "__main__":
    main()
