"""Graph property prediction with a hand-written message-passing network.

Synthetic "molecules" (random small graphs with categorical atom types) are
batched into one disjoint graph; a GIN-style network aggregates neighbour
messages with index_add_, sum-pools per graph and predicts a few graph-level
targets. After building the encoder, the prediction head is re-initialised for
the downstream number of targets (as one does when fine-tuning a pretrained
encoder on a new task).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_graph_batch(gen, num_graphs, num_atom_types, num_targets):
    xs, srcs, dsts, graph_ids, targets = [], [], [], [], []
    offset = 0
    for g in range(num_graphs):
        n = int(torch.randint(5, 10, (1,), generator=gen))
        atoms = torch.randint(0, num_atom_types, (n,), generator=gen)
        # ring backbone plus a few random chords
        src = torch.arange(n)
        dst = (src + 1) % n
        extra = torch.randint(0, n, (2, 2), generator=gen)
        src = torch.cat([src, extra[0]])
        dst = torch.cat([dst, extra[1]])
        # undirected
        s = torch.cat([src, dst]) + offset
        d = torch.cat([dst, src]) + offset
        xs.append(atoms)
        srcs.append(s)
        dsts.append(d)
        graph_ids.append(torch.full((n,), g, dtype=torch.long))
        counts = torch.bincount(atoms, minlength=num_atom_types).float()
        t = torch.stack([counts[: num_atom_types // 2].sum() / n,
                         torch.tensor(n / 10.0),
                         (counts * torch.arange(num_atom_types)).sum() / (n * num_atom_types)])
        targets.append(t[:num_targets])
        offset += n
    return (torch.cat(xs), torch.stack([torch.cat(srcs), torch.cat(dsts)]),
            torch.cat(graph_ids), torch.stack(targets))


class GINLayer(nn.Module):
    def __init__(self, dim, eps=0.0):
        super().__init__()
        self.eps = nn.Parameter(torch.tensor(eps))
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, h, edge_index):
        src, dst = edge_index
        agg = torch.zeros_like(h).index_add_(0, dst, h[src])
        out = self.mlp((1.0 + self.eps) * h + agg)
        return self.norm(h + F.relu(out))


class GraphRegressor(nn.Module):
    def __init__(self, num_atom_types, hidden, num_layers, num_targets=1):
        super().__init__()
        self.atom_emb = nn.Embedding(num_atom_types, hidden)
        self.layers = nn.ModuleList([GINLayer(hidden) for _ in range(num_layers)])
        self.hidden = hidden
        self.head = self._make_head(num_targets)

    def _make_head(self, num_targets):
        return nn.Sequential(nn.Linear(self.hidden, self.hidden), nn.ReLU(),
                             nn.Linear(self.hidden, num_targets))

    def reset_head(self, num_targets):
        self.head = self._make_head(num_targets)

    def forward(self, atoms, edge_index, graph_ids, num_graphs):
        h = self.atom_emb(atoms)
        for layer in self.layers:
            h = layer(h, edge_index)
        pooled = torch.zeros(num_graphs, h.shape[1]).index_add_(0, graph_ids, h)
        return self.head(pooled)


def build_optimizer(model, lr, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or name.endswith("eps") else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=8, help="graphs per batch")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--num-targets", type=int, default=3)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(1000 + args.seed)
    num_atom_types = 6

    model = GraphRegressor(num_atom_types, args.hidden, args.layers)
    if args.bug == "optimizer-wrong-params":
        optimizer = build_optimizer(model, args.lr, weight_decay=0.01)
        model.reset_head(args.num_targets)
    else:
        model.reset_head(args.num_targets)
        optimizer = build_optimizer(model, args.lr, weight_decay=0.01)

    model.train()
    for step in range(args.steps):
        atoms, edge_index, graph_ids, y = make_graph_batch(gen, args.batch_size, num_atom_types,
                                                           args.num_targets)
        pred = model(atoms, edge_index, graph_ids, args.batch_size)
        loss = F.smooth_l1_loss(pred, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
