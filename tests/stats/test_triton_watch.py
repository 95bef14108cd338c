"""The Triton watch (``_triton_watch``) against torch's ``isnan``, ``isposinf`` and
``isneginf``: one launch per tensor and one for many, on every bit pattern of the 8- and
16-bit dtypes and the edges of the wider ones. Without a GPU in Triton's interpreter;
without triton the module skips."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from tandv_tb import formats as fmt
from tests.helpers import triton_source

if not triton_source.TRITON:
    pytest.skip("triton is not installed", allow_module_level=True)

from tandv_tb.stats import _triton_watch  # noqa: E402  (after the skip)


def _counted(tensors) -> tuple[list[list[int]], list[list[int]]]:
    """(one launch per tensor, one launch for all) NaN, +Inf, -Inf counts of ``tensors``."""
    size = _triton_watch.SLOT_COUNTS
    counts = torch.zeros(len(tensors) * size, dtype=torch.int64, device=triton_source.device())
    for slot, tensor in enumerate(tensors):
        _triton_watch.watch_into(tensor, counts, slot)
    each = counts.cpu().reshape(-1, size).tolist()
    counts = torch.zeros((len(tensors) + 2) * size, dtype=torch.int64, device=counts.device)
    _triton_watch.watch_many_into(tensors, counts, [slot + 2 for slot in range(len(tensors))])
    together = counts.cpu().reshape(-1, size).tolist()
    assert together[:2] == [[0] * size] * 2
    return each, together[2:]


def _expected(tensor) -> list[int]:
    wide = tensor.to(torch.float64)
    return [int(f(wide).sum()) for f in (torch.isnan, torch.isposinf, torch.isneginf)]


@pytest.mark.parametrize(
    "dtype", ["float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]
)
def test_watch_counts_nan_and_inf_exactly(dtype):
    """Chunks of every pattern (8 and 16 bits) or of the edges (32 and 64), and each
    non-finite pattern (all for 8 bits, a spread for 16) alone among finite values."""
    numpy_dtype = fmt.numpy_dtype(dtype)
    if numpy_dtype.itemsize <= 2:
        patterns = triton_source.all_patterns(dtype)
    else:
        finfo = ml_dtypes.finfo(numpy_dtype)
        edges = [0.0, -0.0, finfo.max, -finfo.max, finfo.smallest_subnormal, np.inf, -np.inf]
        patterns = np.array([*edges, np.nan, -np.nan], numpy_dtype)
    chunks = np.array_split(patterns, 64)
    with np.errstate(invalid="ignore"):
        finite = patterns[np.isfinite(patterns.astype(np.float64))]
        bad = patterns[~np.isfinite(patterns.astype(np.float64))]
    bad = bad[:: max(1, len(bad) // 64)]
    chunks += [np.insert(finite[:100], k % 100, b) for k, b in enumerate(bad)]
    chunks += [finite, finite[:0]]
    tensors = [triton_source.tensor(c) for c in chunks]
    expected = [_expected(t) for t in tensors]
    each, together = _counted(tensors)
    assert each == expected and together == expected
    assert np.sum(expected) >= 2 * len(bad)


def test_watch_reads_a_dense_permuted_tensor_and_refuses_a_strided_one():
    values = torch.randn(40, 30)
    values[7, 3] = float("nan")
    on_device = values.to(triton_source.device())
    clean = torch.ones(3, 50, 20, device=on_device.device).permute(2, 0, 1)
    assert _triton_watch.unsupported_reason(on_device.t()) is None
    assert _counted([on_device.t(), clean])[0] == [[1, 0, 0], [0, 0, 0]]
    assert "dense" in _triton_watch.unsupported_reason(on_device[::2])
