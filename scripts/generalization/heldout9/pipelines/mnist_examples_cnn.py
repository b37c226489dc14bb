"""pytorch/examples-style MNIST CNN, run on synthetic 'digit' images (templates + noise)."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(16 * 6 * 6, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def synthetic_digits(n, seed):
    g = torch.Generator().manual_seed(seed)
    templates = (torch.rand(10, 1, 16, 16, generator=torch.Generator().manual_seed(7)) > 0.6).float()
    y = torch.randint(0, 10, (n,), generator=g)
    shift = torch.randint(-1, 2, (n, 2), generator=g)
    x = templates[y]
    x = torch.stack([torch.roll(x[i], shifts=(int(shift[i, 0]), int(shift[i, 1])), dims=(1, 2)) for i in range(n)])
    x = x + 0.4 * torch.randn(x.shape, generator=g)
    return (x - 0.1307) / 0.3081, y


def train(args, model, device, train_loader, optimizer, epoch, state):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        if state["step"] >= args.steps:
            return
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        state["step"] += 1
        if batch_idx % args.log_interval == 0:
            print(f'Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)} ({100. * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}')


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    print(f'\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(test_loader.dataset)} ({100. * correct / len(test_loader.dataset):.0f}%)\n')
    return test_loss, correct / len(test_loader.dataset)


def main():
    parser = argparse.ArgumentParser(description='PyTorch MNIST-like Example')
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--test-batch-size', type=int, default=100)
    parser.add_argument('--steps', type=int, default=8, help='total optimizer steps')
    parser.add_argument('--train-size', type=int, default=128)
    parser.add_argument('--optimizer', choices=['adadelta', 'sgd'], default='adadelta')
    parser.add_argument('--lr', type=float, default=1.0)
    parser.add_argument('--gamma', type=float, default=0.7)
    parser.add_argument('--no-scheduler', action='store_true')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--log-interval', type=int, default=1)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    train_kwargs = {'batch_size': args.batch_size, 'shuffle': True,
                    'generator': torch.Generator().manual_seed(args.seed)}
    test_kwargs = {'batch_size': args.test_batch_size}

    dataset1 = TensorDataset(*synthetic_digits(args.train_size, seed=args.seed + 1))
    dataset2 = TensorDataset(*synthetic_digits(200, seed=12345))
    train_loader = DataLoader(dataset1, **train_kwargs)
    test_loader = DataLoader(dataset2, **test_kwargs)

    model = Net().to(device)
    if args.optimizer == 'adadelta':
        optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    else:
        optimizer = optim.SGD(model.parameters(), lr=args.lr * 0.05, momentum=0.9)

    scheduler = None if args.no_scheduler else StepLR(optimizer, step_size=1, gamma=args.gamma)
    state = {"step": 0}
    epoch = 1
    result = None
    while state["step"] < args.steps:
        train(args, model, device, train_loader, optimizer, epoch, state)
        result = test(model, device, test_loader)
        if scheduler is not None:
            scheduler.step()
        epoch += 1
    print(f"test_loss={result[0]:.4f} test_acc={result[1]:.4f}")


if __name__ == '__main__':
    main()
