"""What tracking dispatches on the Triton path (``TANDV_TB_KERNEL=triton``; without a GPU in
Triton's interpreter, where the trackers treat CPU tensors as a GPU's), counted on a small
GPT: 4 blocks, AdamW, every tensor type, ``float8_e4m3fn``, ``float8_e5m2`` and ``nvfp4``.

Counted: Triton launches plus torch operations (a ``TorchDispatchMode``), those the
interpreter makes to run a kernel aside (``tests/helpers/launch_counts``). Only what
tracking adds counts: each phase of the step (forward and backward; ``optimizer.step()``
with ``tracker.step()``) less the same phase of a plain step of the same model
(``tests/helpers/step_dispatches``). Goals (issue 40): at most 4 per tracked tensor on a
tracked step, down from some 300 with the array kernel (bench/launches.py); on an untracked
step with the watch at most 2 per hooked tensor and 16 for everything read at the
optimizer's step and ``step()`` together. Without triton the module skips."""

from __future__ import annotations

import pytest

from tests.helpers import triton_source

if not triton_source.TRITON:
    pytest.skip("triton is not installed", allow_module_level=True)

from tests.helpers.step_dispatches import gpt_step_dispatches  # noqa: E402  (after the skip)

STATISTICS = {"stats_main", "stats_nvfp4", "stats_finalize"}


def test_a_gpt_step_dispatches_within_the_goals(monkeypatch):
    monkeypatch.setenv("TANDV_TB_KERNEL", "triton")
    counted = gpt_step_dispatches(device=str(triton_source.device()))
    assert counted.tracked_tensors > 250 and counted.hooked_tensors > 60  # every type
    assert counted.per_tracked_tensor <= 4, counted
    assert counted.per_hooked_tensor <= 2, counted
    assert counted.step_reads <= 16, counted
    # Each hooked tensor its own kernels; what step() reads a few launches for all
    # (float32 here: one group of main, nvfp4 and finalize for the weight gradients at the
    # optimizer's step, one for the weights and optimizer state at step()).
    assert set(counted.tracked.hooks.launches) == STATISTICS
    assert sorted(counted.tracked.step.launches) == sorted([*STATISTICS] * 2)
    assert set(counted.watched.hooks.launches) == {"watch_kernel"}
    assert counted.watched.step.launches == ["watch_kernel"] * 2
