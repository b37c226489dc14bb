"""Self-launching 2-process DDP (torch.multiprocessing.spawn, gloo, MASTER_ADDR=127.0.0.1 and a free port
picked by binding a socket to port 0) training an EmbeddingBag bag-of-words classifier with flat token
tensors plus offsets, Adagrad, and rank-strided data shards. Launch with plain `python`."""
import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class BagOfWordsClassifier(nn.Module):
    def __init__(self, vocab, dim, n_classes):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.hidden = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, n_classes)

    def forward(self, flat_tokens, offsets):
        h = self.bag(flat_tokens, offsets)
        return self.out(F.relu(self.hidden(h)))


def make_documents(seed, n, vocab, n_classes):
    gen = torch.Generator().manual_seed(seed)
    topic_words = torch.randint(0, vocab, (n_classes, 6), generator=gen)
    docs, labels = [], []
    for _ in range(n):
        label = int(torch.randint(0, n_classes, (1,), generator=gen))
        length = int(torch.randint(5, 16, (1,), generator=gen))
        words = torch.randint(0, vocab, (length,), generator=gen)
        n_topic = length // 2
        words[:n_topic] = topic_words[label][torch.randint(0, 6, (n_topic,), generator=gen)]
        docs.append(words)
        labels.append(label)
    return docs, torch.tensor(labels)


def collate(docs):
    offsets = torch.tensor([0] + [len(d) for d in docs[:-1]]).cumsum(0)
    return torch.cat(docs), offsets


def worker(rank, world, port, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)

    vocab, n_classes = 60, 4
    docs, labels = make_documents(args.seed, 320, vocab, n_classes)
    my_idx = list(range(rank, len(docs), world))  # rank-strided shard
    order_gen = torch.Generator().manual_seed(args.seed + rank)

    model = DDP(BagOfWordsClassifier(vocab, 24, n_classes))
    optimizer = torch.optim.Adagrad(model.parameters(), lr=args.lr)

    for _step in range(args.steps):
        pick = torch.randint(0, len(my_idx), (args.batch_size,), generator=order_gen).tolist()
        batch = [my_idx[i] for i in pick]
        flat, offsets = collate([docs[i] for i in batch])
        loss = F.cross_entropy(model(flat, offsets), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    logged = loss.detach().clone()
    dist.all_reduce(logged)
    if rank == 0:
        print(f"final loss {logged.item() / world:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()
    world = 2
    mp.spawn(worker, args=(world, free_port(), args), nprocs=world, join=True)


if __name__ == "__main__":
    main()
