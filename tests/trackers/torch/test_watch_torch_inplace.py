"""The PyTorch watch is exact when a tensor is edited in place after its hook ran.

Each tensor is read where the watch meets it: a module output in its forward hook,
before a later ``ReLU(inplace=True)`` overwrites it; a gradient w.r.t. an output in its
tensor hook during the backward pass; weight gradients, weights and optimizer state at
``step()``, as ``optimizer.step()`` used them (after ``clip_grad_norm_``).
"""

from __future__ import annotations

import torch
from torch import nn

from tandv_tb.event_files.nonfinite import read_nonfinite
from tandv_tb.torch import track
from tests.helpers.torch_models import NanGradient

NAN, INF = float("nan"), float("inf")
POISONED_STEP = 2


class MinusInf(nn.Module):
    """A linear layer whose output holds 3 -Inf and 2 NaN at step ``POISONED_STEP``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if self.step == POISONED_STEP:
            y = y.clone()
            y.view(-1)[:5] = torch.tensor([-INF, -INF, -INF, NAN, NAN])
        return y


class TwoBranches(nn.Module):
    """``a(x) + b(x)``; at step ``POISONED_STEP`` every gradient w.r.t. ``b``'s output is
    NaN, ``a``'s stays finite."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 1)
        self.b = nn.Linear(6, 1)
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.b(x)
        return self.a(x) + (NanGradient.apply(b) if self.step == POISONED_STEP else b)


def _train(model, stepped, logdir, clip=False, **options):
    torch.manual_seed(3)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    batches = [torch.randn(8, 6) for _ in range(POISONED_STEP + 1)]
    losses = []
    with track(model, logdir=str(logdir), optimizer=optimizer, every=100, **options) as t:
        for step, x in enumerate(batches):
            stepped.step = step
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            t.step()
            losses.append(loss.detach())
    return losses


def _counts(logdir):
    (found,) = read_nonfinite(logdir)
    assert found.step == POISONED_STEP  # an untracked step (every=100)
    return {(e.tensor_type, e.name): (e.nan, e.posinf, e.neginf) for e in found.entries}


def _relu_model() -> tuple[nn.Module, MinusInf]:
    torch.manual_seed(0)
    poison = MinusInf()
    return nn.Sequential(poison, nn.ReLU(inplace=True), nn.Linear(6, 1)), poison


def test_an_output_overwritten_by_an_inplace_relu_is_counted_as_returned(tmp_path):
    losses = _train(*_relu_model(), tmp_path / "on")
    counts = _counts(tmp_path / "on")
    assert counts[("Activation", "0")] == (2, 0, 3)  # as returned, before ReLU zeroed -Inf
    assert counts[("Activation", "1")] == (2, 0, 0)  # the same tensor after ReLU
    assert ("Activation", "0.lin") not in counts
    # row 0 of the output is NaN: d(loss)/d(output) has one NaN, w.r.t. ReLU's output six
    assert counts[("Gradient", "2")] == (1, 0, 0)
    assert counts[("Gradient", "1")] == (6, 0, 0)
    off = _train(*_relu_model(), tmp_path / "off", watch_nonfinite=False)
    assert [loss.item() for loss in losses[:POISONED_STEP]] == [
        loss.item() for loss in off[:POISONED_STEP]
    ]
    assert losses[POISONED_STEP].isnan() and off[POISONED_STEP].isnan()


def test_clipped_nan_gradients_are_counted_as_the_optimizer_used_them(tmp_path):
    model = TwoBranches()
    _train(model, model, tmp_path / "plain")
    plain = _counts(tmp_path / "plain")
    assert plain[("Gradient", "b")] == (8, 0, 0)  # read in the backward pass
    assert ("Gradient", "a") not in plain
    assert plain[("Weight_Gradient", "b.weight")] == (6, 0, 0)
    assert ("Weight_Gradient", "a.weight") not in plain
    assert plain[("Weight", "b.weight")] == (6, 0, 0)
    assert ("Weight", "a.weight") not in plain

    model = TwoBranches()
    _train(model, model, tmp_path / "clipped", clip=True)
    clipped = _counts(tmp_path / "clipped")
    # the gradients w.r.t. outputs were read before clipping, the weight gradients after:
    # the norm is NaN, so clip_grad_norm_ multiplied every weight gradient by NaN
    assert clipped[("Gradient", "b")] == (8, 0, 0)
    assert ("Gradient", "a") not in clipped
    for name, size in (("a.weight", 6), ("a.bias", 1), ("b.weight", 6), ("b.bias", 1)):
        assert clipped[("Weight_Gradient", name)] == (size, 0, 0)
        assert clipped[("Weight", name)] == (size, 0, 0)
