"""The Triton statistics kernels against the compiled CPU kernel (itself checked against
the independent references by ``test_stats_engine`` and ``test_block_formats``, where the
Triton kernels are the ``torch-triton`` source too): every count equal, the statistics
within the contract's 2e-4, on every bit pattern of the 8- and 16-bit dtypes they read, in
every element and block format; and the many-tensor launches equal to the one-tensor
ones, bit for bit.

Without a GPU they run in Triton's interpreter (``tests/conftest.py``); without triton the
module skips.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tandv_tb import formats as fmt
from tandv_tb.formats import blocks as block_formats
from tests.helpers import triton_source
from tests.helpers.triton_source import all_patterns, assert_same_stats, cpu_stats

if not triton_source.TRITON:
    pytest.skip("triton is not installed", allow_module_level=True)

from tandv_tb.stats import _triton_launch  # noqa: E402  (after the skip)

ELEMENTS = (
    "float8_e4m3fn",
    "float8_e5m2",
    "float16",
    "bfloat16",
    "float6_e3m2fn",
    "float6_e2m3fn",
    "float4_e2m1fn",
    "float8_e8m0fnu",
)
FORMATS = fmt.check_formats((*ELEMENTS, *block_formats.with_rules()))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("row_length", [256, 48])
def test_every_bit_pattern_in_every_format(dtype, row_length):
    """Rows of 256 (whole blocks) and of 48 (each row's last MX block half full): zeros of
    both signs, every subnormal, ties, the largest finite values, NaN and Inf."""
    values = all_patterns(dtype, pad_to=row_length).reshape(-1, row_length)
    got = triton_source.triton_stats(values, FORMATS)
    assert_same_stats(got, cpu_stats(values, FORMATS))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_float32_patterns_around_every_binade(dtype):
    """float32 (and the 16-bit dtypes cast from it): values at and around each power of
    two, subnormals, NaN and Inf, in rows of 40 (a short last block)."""
    bits = np.arange(-2, 3, dtype=np.int64)[None, :] + (np.arange(1, 255) << 23)[:, None]
    tiny = np.array([1, 2, 3, 0x7FFFFF, 0x400000, 0x400001], np.int64)
    patterns = np.concatenate([bits.reshape(-1), tiny, [0, 0x7F800000, 0x7FC00000]])
    signed = np.concatenate([patterns, patterns | (1 << 31)]).astype(np.uint32)
    values = fmt.cast_array(signed.view(np.float32), fmt.numpy_dtype(dtype))
    values = np.concatenate([values, np.zeros(-len(values) % 40, values.dtype)])
    values = values.reshape(-1, 40)
    assert_same_stats(triton_source.triton_stats(values, FORMATS), cpu_stats(values, FORMATS))


@pytest.mark.parametrize(
    ("shape", "fill"),
    [((0,), 1.0), ((5, 0), 1.0), ((), -3.5), ((1,), 0.0), ((33,), np.nan), ((2, 17), np.inf)],
)
def test_empty_zero_dim_and_tensors_without_finite_values(shape, fill):
    values = np.full(shape, fill, np.float32)
    assert_same_stats(triton_source.triton_stats(values, FORMATS), cpu_stats(values, FORMATS))


def test_programs_merge_moments_and_a_tile_of_outliers():
    """Many tiles over several programs: LayerNorm-like values (std tiny against the mean)
    and a far outlier in a later tile, which moves every earlier tile's unit."""
    rng = np.random.default_rng(4)
    values = (1 + 1e-4 * rng.standard_normal(40_000)).astype(np.float32)
    values[30_001] = 3e30
    values = values.reshape(-1, 100)
    formats = ("nvfp4", "mxfp8_e4m3")
    assert_same_stats(triton_source.triton_stats(values, formats), cpu_stats(values, formats))


def _many(tensors, formats) -> list[torch.Tensor]:
    offsets = _triton_launch.packed_offsets(tensors, formats)
    out = torch.zeros(offsets[-1], dtype=torch.int64, device=triton_source.device())
    _triton_launch.compute_many_into(tensors, formats, out, offsets[:-1])
    return [out[a:b].cpu() for a, b in zip(offsets[:-1], offsets[1:])]


def _one(tensor, formats) -> torch.Tensor:
    length = _triton_launch.packed_length(fmt.canonical_name(tensor.dtype), formats)
    out = torch.zeros(length + 5, dtype=torch.int64, device=tensor.device)
    _triton_launch.compute_into(tensor, formats, out, 5)  # at an offset
    assert not out[:5].any()
    return out[5:].cpu()


def test_many_tensors_give_each_the_record_of_one_bit_for_bit():
    formats = fmt.check_formats(("float8_e4m3fn", "float8_e5m2", "nvfp4", "mxfp4_e2m1:rceil"))
    tensors = triton_source.mixed_tensors()
    many = _many(tensors, formats)
    for tensor, packed in zip(tensors, many):
        assert torch.equal(packed, _one(tensor, formats)), tensor.dtype
        dtype = fmt.canonical_name(tensor.dtype)
        assert_same_stats(_triton_launch.unpack(dtype, formats, packed), cpu_stats(tensor, formats))
    again = _many(tensors[::-1], formats)[::-1]  # another table, other workspace rows
    assert all(torch.equal(a, b) for a, b in zip(again, many))
