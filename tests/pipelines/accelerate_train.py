"""A tiny Accelerate training loop (CPU), launched plainly or with torchrun."""

import json

import torch
from accelerate import Accelerator
from torch import nn


def main() -> None:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(3)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=gen), torch.randn(64, 2, generator=gen))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    net, opt, loader = accelerator.prepare(net, opt, loader)
    losses = []
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        accelerator.backward(loss)
        opt.step()
        losses.append(loss.item())
    print(json.dumps({"rank": accelerator.process_index, "losses": losses}))


if __name__ == "__main__":
    main()
