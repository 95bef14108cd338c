"""What the Triton path dispatches, counted (``tests/helpers/launch_counts``): Triton
launches plus torch operations. Goals: at most 4 per tracked tensor; for everything
``step()`` reads, at most 16 for the statistics and 16 for the watch; the watch of one
hooked tensor one launch. Without a GPU in Triton's interpreter; without triton the
module skips."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tandv_tb.stats import engine
from tests.helpers import triton_source
from tests.helpers.triton_source import assert_same_stats, cpu_stats

if not triton_source.TRITON:
    pytest.skip("triton is not installed", allow_module_level=True)

from tandv_tb.stats import _triton_watch  # noqa: E402  (after the skip)
from tests.helpers.launch_counts import counting  # noqa: E402

FORMATS = ("float8_e4m3fn", "float8_e5m2", "nvfp4")


def _step_tensors() -> list[torch.Tensor]:
    """What ``step()`` reads of a small model: float32 weights, their gradients and two
    optimizer states each (matrices, vectors, a 0-d scalar), and bfloat16 copies of six."""
    rng = np.random.default_rng(2)
    shapes = [(64, 32), (32,), (32, 64), (64,), (16, 32), ()]
    weights = [np.asarray(rng.standard_normal(s), np.float32) for s in shapes]
    scales = (1.0, 1e-3, 1e-6, 1e-8)
    tensors = [triton_source.tensor(np.asarray(w * k, np.float32)) for k in scales for w in weights]
    return tensors + [t.to(torch.bfloat16) for t in tensors[:6]]


def test_one_tracked_tensor_costs_at_most_four_launches_and_operations(monkeypatch):
    """Two element formats and nvfp4: three launches (main, nvfp4, finalize), no torch
    operation (the result goes to a slice of the device's output arena); the array kernel
    dispatches some 25 times more for the same."""
    monkeypatch.setenv("TANDV_TB_KERNEL", "triton")
    tensor = triton_source.tensor(np.random.default_rng(0).standard_normal((64, 48), np.float32))
    tensor.requires_grad_(True)
    engine.compute(tensor, FORMATS)  # compiles, and sizes the workspace
    with counting() as counts:
        engine.compute(tensor, FORMATS)
    assert counts.launches == ["stats_main", "stats_nvfp4", "stats_finalize"]
    assert counts.total <= 4, counts
    monkeypatch.setenv("TANDV_TB_KERNEL", "array")
    with counting() as array_counts:
        engine.compute(tensor, FORMATS)
    assert array_counts.total > 25 * counts.total, array_counts


def test_step_reads_take_a_few_launches_for_every_tensor(monkeypatch):
    """The statistics of 30 tensors of two dtypes and their watch, each in a few
    launches for all of them; the watch of one hooked tensor one launch."""
    monkeypatch.setenv("TANDV_TB_KERNEL", "triton")
    tensors = _step_tensors()
    words = len(tensors) * _triton_watch.SLOT_COUNTS
    found = torch.zeros(words, dtype=torch.int64, device=triton_source.device())
    slots = list(range(len(tensors)))
    engine.fetch(engine.compute_many(tensors, FORMATS))  # compiles, caches the table
    _triton_watch.watch_many_into(tensors, found, slots)
    with counting() as statistics:
        pending = engine.compute_many(tensors, FORMATS)
    with counting() as watch:
        _triton_watch.watch_many_into(tensors, found, slots)
    with counting() as hooked:
        _triton_watch.watch_into(tensors[0], found, 0)
    # Per dtype (two here) main, nvfp4 and finalize; no torch operation: the output is a
    # slice of the arena, and the tables of these tensors are cached on the device.
    assert len(statistics.launches) == 6 and statistics.operations == [], statistics
    assert len(watch.launches) == 2 and watch.operations == [], watch
    assert hooked.total == 1, hooked
    for tensor, got in list(zip(tensors, engine.fetch(pending)))[::7]:
        assert_same_stats(got, cpu_stats(tensor, FORMATS))
