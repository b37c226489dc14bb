"""DataLoader workers started with spawn, calling a wrapped API inside the worker."""

import torch
from torch.utils.data import DataLoader, TensorDataset


class Noisy(TensorDataset):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return torch.nn.functional.dropout(x, 0.1, training=False), y  # a wrapped API inside the worker

def main():
    ds = Noisy(torch.randn(64, 4), torch.randn(64, 1))
    dl = DataLoader(ds, batch_size=16, num_workers=2, multiprocessing_context="spawn")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in dl:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    print("ok")

if __name__ == "__main__":
    main()
