"""Inference only: the bundled CNN, never trained, evaluated on a few batches in eval mode under
``torch.no_grad`` (its dropout is called with training=False and never with True)."""

import json

import torch

from traincheck_agent.examples.cnn_train import SmallCNN


def main() -> None:
    torch.manual_seed(0)
    model = SmallCNN().eval()
    gen = torch.Generator().manual_seed(1)
    predictions = []
    with torch.no_grad():
        for _ in range(4):
            predictions += model(torch.randn(8, 1, 28, 28, generator=gen)).argmax(dim=1).tolist()
    print(json.dumps({"predictions": predictions}))


if __name__ == "__main__":
    main()
