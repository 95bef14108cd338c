"""The Triton kernels as the statistics tests call them: on the current CUDA device where
there is one, else on CPU tensors in Triton's interpreter (``tests/conftest.py`` sets
``TRITON_INTERPRET=1`` before any kernel is defined). Without ``triton`` the tests that use
them skip (``TRITON``). Their results are compared with the compiled CPU kernel's
(``assert_same_stats``), which the statistics tests check against the references."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

from tandv_tb import formats as fmt
from tandv_tb.event_files.record import NumericsRecord
from tandv_tb.stats import engine
from tandv_tb.stats.tensor_stats import TensorStats
from tests.helpers.reference import torch_tensor

#: Whether triton imports here, and the statistics tests' source that runs the kernels.
TRITON = importlib.util.find_spec("triton") is not None
TRITON_SOURCES = ["torch-triton"] if TRITON else []
#: How far two kernels' statistics may differ (the contract's tolerance).
RTOL = 2e-4


def interpreting() -> bool:
    """Whether the kernels run in Triton's (slow) interpreter: small tensors only."""
    return not torch.cuda.is_available()


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def tensor(values: np.ndarray) -> torch.Tensor:
    """``values`` (any float dtype torch has) as a tensor where the kernels run."""
    return torch_tensor(np.asarray(values)).to(device())


def triton_stats(values: np.ndarray, formats: tuple[str, ...]) -> TensorStats:
    """The statistics of ``values`` through the Triton kernels (``compute_into``); block
    formats take their blocks along the last dimension."""
    from tandv_tb.stats import _triton_launch

    formats = fmt.check_formats(formats)
    dtype = values.dtype.name
    if dtype == "float64":
        pytest.skip("the Triton kernels do not read float64 (such tensors take the array kernel)")
    values_on_device = tensor(values)
    assert _triton_launch.unsupported_reason(values_on_device, formats) is None
    length = _triton_launch.packed_length(dtype, formats)
    out = torch.empty(length, dtype=torch.int64, device=device())
    _triton_launch.compute_into(values_on_device, formats, out)
    return _triton_launch.unpack(dtype, formats, out.cpu().numpy())


def cpu_stats(values: np.ndarray, formats: tuple[str, ...]) -> TensorStats:
    """The compiled CPU kernel's statistics of a host array (or a torch tensor's values)."""
    if isinstance(values, torch.Tensor):
        name = fmt.canonical_name(values.dtype)
        values = values.cpu().float().numpy().astype(fmt.numpy_dtype(name))
    return engine.compute(values, formats, threads=1).ready


def all_patterns(dtype: str, pad_to: int = 1) -> np.ndarray:
    """Every bit pattern of an 8- or 16-bit dtype once, then zeros up to a multiple of
    ``pad_to``."""
    numpy_dtype = fmt.numpy_dtype(dtype)
    uint = np.uint8 if numpy_dtype.itemsize == 1 else np.uint16
    patterns = np.arange(np.iinfo(uint).max + 1, dtype=np.int64).astype(uint)
    pad = -len(patterns) % pad_to
    return np.concatenate([patterns, np.zeros(pad, uint)]).view(numpy_dtype)


def assert_same_stats(got: TensorStats, want: TensorStats) -> None:
    """Every count of two kernels' statistics equal (bins, casts, blocks and their scale
    exponents); the statistics and the block formats' sums within ``RTOL``."""
    assert_same_records(got.to_record(), want.to_record())


def assert_same_records(a: NumericsRecord, b: NumericsRecord) -> None:
    """``assert_same_stats`` of two records (as a tracker writes them)."""
    for key in ("numel", "zero_count", "nan_count", "posinf_count", "neginf_count"):
        assert getattr(a, key) == getattr(b, key), key
    assert a.exponent_histogram() == b.exponent_histogram()
    assert (a.underflow, a.overflow) == (b.underflow, b.overflow)
    for key, want_value in b.statistics.items():
        got_value = a.statistics[key]
        if math.isnan(want_value):
            assert math.isnan(got_value), key
            continue
        scale = b.statistics["rm2"] if key == "mean" else abs(want_value)
        assert abs(got_value - want_value) <= RTOL * scale, (key, got_value, want_value)
    counts = ("underflow", "overflow", "zero_blocks", "clamped_low", "clamped_high", "scale_lo")
    for name, block in b.blocks.items():
        mine = a.blocks[name]
        assert [getattr(mine, k) for k in counts] == [getattr(block, k) for k in counts], name
        assert np.array_equal(mine.scales, block.scales), name
        unit = 4.0 ** (mine.exponent - block.exponent)
        np.testing.assert_allclose(mine.signal * unit, block.signal, rtol=RTOL, err_msg=name)
        np.testing.assert_allclose(
            mine.error * unit, block.error, rtol=RTOL, atol=RTOL * block.signal, err_msg=name
        )


def mixed_tensors() -> list[torch.Tensor]:
    """Tensors of every dtype the kernels read, of every shape kind (matrices, a 3-d one
    with short rows, empty, 0-d, one value)."""
    rng = np.random.default_rng(9)
    shapes = {
        "float32": [(30, 70), (0,), ()],
        "bfloat16": [(3, 5, 33), (1,)],
        "float16": [(2000,)],
        "float8_e4m3fn": [(64, 16)],
        "float8_e5m2": [(7,)],
    }
    tensors = []
    for dtype, sizes in shapes.items():
        for shape in sizes:
            values = rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 12, shape)
            tensors.append(tensor(fmt.cast_array(np.asarray(values), fmt.numpy_dtype(dtype))))
    return tensors
