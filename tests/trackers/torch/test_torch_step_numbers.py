"""The tracker's step numbers set by a trainer (``tracker.step(next_step=...)``),
``is_tracked``, and the trainer callbacks' libraries imported only by their modules."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from tandv_tb.torch import is_tracked, track
from tests.helpers.trainers import numerics_steps


def _train_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    model(torch.randn(3, 2)).square().mean().backward()
    optimizer.step()


def test_next_step_numbers_the_following_step_and_every_follows_it(tmp_path):
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with track(model, logdir=tmp_path, optimizer=optimizer, every=2, init_step=3) as tracker:
        for next_step in (4, 6, 7, None, 10):  # step 3 untracked, 4 and 6 tracked, ...
            _train_step(model, optimizer)
            tracker.step(next_step=next_step)
        assert tracker.current_step == 10
        with pytest.raises(ValueError, match=r"next_step must be > current_step \(10\), got 10"):
            tracker.step(next_step=10)
        with pytest.raises(TypeError, match="next_step must be an int"):
            tracker.step(next_step=11.0)
    assert numerics_steps(tmp_path)[("Activation", "0")] == [4, 6, 8]


def test_is_tracked_covers_the_module_its_parts_and_its_holders(tmp_path):
    inner = nn.Linear(2, 2)
    outer = nn.Sequential(inner, nn.ReLU())
    holder = nn.Sequential(outer)
    assert not is_tracked(outer)
    first = track(outer, logdir=tmp_path / "a")
    second = track(outer, logdir=tmp_path / "b")
    assert is_tracked(outer) and is_tracked(inner) and is_tracked(holder)
    first.close()
    assert is_tracked(outer)  # the second tracker still hooks it
    second.close()
    assert not is_tracked(outer) and not is_tracked(holder)


@pytest.mark.parametrize("module", ["tandv_tb", "tandv_tb.plugin", "tandv_tb.torch"])
def test_the_package_imports_neither_lightning_nor_transformers(module):
    code = (
        f"import sys, {module}\n"
        "loaded = {'lightning', 'pytorch_lightning', 'transformers'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
