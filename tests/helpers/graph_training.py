"""The small models and the training loop of the PyTorch graph-capture tests (no tests here)."""

from __future__ import annotations

import torch
from torch import nn

from tandv_tb.torch import track


def train(model, logdir=None, steps=1, accumulation=1, before_step=None, **tracking):
    """Adam on random data (tracked when ``logdir`` is given); the losses."""
    torch.manual_seed(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    tracker = track(model, logdir=str(logdir), optimizer=optimizer, **tracking) if logdir else None
    losses = []
    for step in range(steps):
        if before_step is not None:
            before_step(step)
        for _ in range(accumulation):
            loss = model(torch.randn(16, 4)).square().mean()
            loss.backward()
            losses.append(loss.item())
        optimizer.step()
        optimizer.zero_grad()
        if tracker is not None:
            tracker.step()
    if tracker is not None:
        tracker.close()
    return losses


def seeded(make):
    torch.manual_seed(0)
    return make()


class ResidualMLP(nn.Module):
    """An input layer, two residual blocks (``h + block(h)``), a functional ReLU, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(2))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(torch.relu(h))


class Twice(nn.Module):
    """``shared`` called twice, a functional ReLU between."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.shared(self.shared(x).relu()))
