"""``TANDV_TB_KERNEL``: one kernel for every torch tensor, the Triton kernels' fallbacks
(counted, warned once) and the warning without triton, ``engine.compute_many``. The
results of every kernel equal the CPU kernel's. Without a GPU the Triton kernels run in
Triton's interpreter; without triton the module skips."""

from __future__ import annotations

import collections
import sys

import numpy as np
import pytest
import torch

from tandv_tb.stats import _kernel_choice, engine
from tests.helpers import triton_source
from tests.helpers.triton_source import assert_same_stats, cpu_stats

if not triton_source.TRITON:
    pytest.skip("triton is not installed", allow_module_level=True)

FORMATS = ("float8_e4m3fn", "nvfp4")


@pytest.fixture
def fallbacks(monkeypatch):
    """A fresh tally of fallbacks (each reason is warned about once per process)."""
    tally = collections.Counter()
    monkeypatch.setattr(_kernel_choice, "fallbacks", tally)
    return tally


def _kernel_of(pending) -> str:
    if pending.ready is not None:
        return "cpu"
    return "array" if pending.packed is None else "triton"


@pytest.mark.parametrize("setting", ["cpu", "array", "triton"])
def test_the_switch_picks_one_kernel_for_every_torch_tensor(monkeypatch, setting):
    monkeypatch.setenv("TANDV_TB_KERNEL", setting)
    tensor = triton_source.tensor(np.arange(40, dtype=np.float32).reshape(4, 10))
    pending = engine.compute(tensor, FORMATS)
    assert _kernel_of(pending) == setting
    [stats] = engine.fetch([pending])
    assert_same_stats(stats, cpu_stats(tensor, FORMATS))
    assert engine.compute(np.ones(3, np.float32)).ready is not None  # numpy: the CPU kernel


def test_auto_keeps_host_tensors_on_the_cpu_kernel(monkeypatch):
    monkeypatch.delenv("TANDV_TB_KERNEL", raising=False)
    assert _kernel_of(engine.compute(torch.ones(3))) == "cpu"


def test_an_unknown_setting_is_a_value_error_naming_the_choices(monkeypatch):
    monkeypatch.setenv("TANDV_TB_KERNEL", "gpu")
    with pytest.raises(ValueError, match="auto, cpu, array, triton"):
        engine.compute(torch.ones(3))


def test_tensors_the_kernels_cannot_take_fall_back_counted_and_warned_once(monkeypatch, fallbacks):
    monkeypatch.setenv("TANDV_TB_KERNEL", "triton")
    strided = triton_source.tensor(np.arange(60, dtype=np.float32).reshape(6, 10))[:, ::3]
    with pytest.warns(RuntimeWarning, match="not dense") as warned:
        pending = [engine.compute(strided, FORMATS) for _ in range(3)]
    assert len(warned) == 1 and all(_kernel_of(p) == "array" for p in pending)
    assert sum(fallbacks.values()) == 3
    assert_same_stats(engine.fetch(pending)[0], cpu_stats(strided, FORMATS))
    permuted = triton_source.tensor(np.arange(60, dtype=np.float32).reshape(6, 10)).t()
    assert _kernel_of(engine.compute(permuted, ("float8_e5m2",))) == "triton"  # no blocks
    with pytest.warns(RuntimeWarning, match="side by side"):  # blocks across rows
        assert _kernel_of(engine.compute(permuted, FORMATS)) == "array"


def test_rows_in_another_order_are_read_as_they_lie(monkeypatch, fallbacks):
    """A permuted tensor whose rows are each in one piece (the gradient of a batch-first
    attention output: strides (32, 64, 1)) takes the Triton kernels with block formats:
    its blocks are the same, in another order."""
    monkeypatch.setenv("TANDV_TB_KERNEL", "triton")
    rng = np.random.default_rng(4)
    values = np.asarray(rng.standard_normal((16, 2, 40)) * 2.0 ** rng.integers(-9, 9, 40))
    rows = triton_source.tensor(values.astype(np.float32)).transpose(0, 1)
    assert not rows.is_contiguous() and rows.stride(-1) == 1
    pending = engine.compute(rows, FORMATS)
    assert _kernel_of(pending) == "triton" and not fallbacks
    assert_same_stats(engine.fetch([pending])[0], cpu_stats(rows, FORMATS))


def test_without_triton_one_warning_names_pip_install(monkeypatch):
    monkeypatch.setenv("TANDV_TB_KERNEL", "triton")
    monkeypatch.setitem(sys.modules, "tandv_tb.stats._triton_launch", None)
    _kernel_choice.triton_launch.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="pip install triton") as warned:
            pending = [engine.compute(triton_source.tensor(np.ones(5))) for _ in range(2)]
        assert len(warned) == 1 and all(_kernel_of(p) == "array" for p in pending)
    finally:
        _kernel_choice.triton_launch.cache_clear()


def test_compute_many_matches_compute(monkeypatch, fallbacks):
    """Many tensors in a few launches into one arena slice; a float64 one (which the
    Triton kernels do not read) through the array kernel beside them."""
    monkeypatch.setenv("TANDV_TB_KERNEL", "triton")
    tensors = [*triton_source.mixed_tensors(), triton_source.tensor(np.ones(3))]
    with pytest.warns(RuntimeWarning, match="float64"):
        pending = engine.compute_many(tensors, FORMATS)
    assert [_kernel_of(p) for p in pending] == ["triton"] * (len(tensors) - 1) + ["array"]
    assert len({id(p.packed) for p in pending[:-1]}) == 1
    one = engine.fetch([engine.compute(t, FORMATS) for t in tensors])
    for many, single, tensor in zip(engine.fetch(pending), one, tensors):
        assert_same_stats(many, single)
        assert_same_stats(many, cpu_stats(tensor, FORMATS))


def test_a_failed_launch_falls_back_for_good_without_a_crash(monkeypatch, fallbacks):
    """Where Triton cannot run (a GPU it cannot compile for, say) the array kernel takes
    that tensor and every later one, with one warning; a launch interrupted half-way
    leaves the workspace to be zeroed by its next use."""
    from tandv_tb.stats import _triton_launch, _triton_runtime

    monkeypatch.setenv("TANDV_TB_KERNEL", "triton")
    monkeypatch.setattr(_kernel_choice, "_broken", "")
    tensor = triton_source.tensor(np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32))
    real_launch = _triton_runtime.launch

    def first_launch_then_fail(kernel, *args, **kwargs):
        real_launch(kernel, *args, **kwargs)
        if kernel is _triton_launch.kernels.stats_main:
            raise RuntimeError("no ptxas for this GPU")

    monkeypatch.setattr(_triton_runtime, "launch", first_launch_then_fail)
    with pytest.warns(RuntimeWarning, match="no ptxas") as warned:
        pending = [engine.compute(tensor, FORMATS) for _ in range(2)]
    assert len(warned) == 1 and [_kernel_of(p) for p in pending] == ["array", "array"]
    monkeypatch.setattr(_triton_runtime, "launch", real_launch)
    monkeypatch.setattr(_kernel_choice, "_broken", "")
    [stats] = engine.fetch([engine.compute(tensor, FORMATS)])  # the workspace zeroed first
    assert_same_stats(stats, cpu_stats(tensor, FORMATS))
