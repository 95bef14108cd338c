"""Block-scaled formats (MX, MX with the round-up scale rule, nvfp4) against the independent
reference (``tests/helpers/block_reference.py``): every source of the engine, every float
dtype, crafted and random tensors. Counts and scale exponents must be equal; the sums of
squares equal up to their summation's rounding (float64, or float32 where the source sums
in float32)."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest
import torch

from tandv_tb import formats as fmt
from tandv_tb.stats import engine
from tandv_tb.stats.tensor_stats import TensorStats
from tests.helpers import stats_sources
from tests.helpers.block_reference import BLOCK_FORMATS, block_reference
from tests.helpers.devices import DEVICE_SOURCES
from tests.helpers.triton_source import TRITON_SOURCES, interpreting

FORMATS = fmt.check_formats(("float8_e4m3fn", *BLOCK_FORMATS))
DTYPES = ["float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]
SOURCES = [
    "numpy",
    "torch",
    "torch-device-kernel",
    "jax-jit",
    "jax-jit-device-kernel",
    *TRITON_SOURCES,
    *DEVICE_SOURCES,
]
MX = {
    "mxfp8_e4m3": ml_dtypes.float8_e4m3fn,
    "mxfp8_e5m2": ml_dtypes.float8_e5m2,
    "mxfp6_e3m2": ml_dtypes.float6_e3m2fn,
    "mxfp6_e2m3": ml_dtypes.float6_e2m3fn,
    "mxfp4_e2m1": ml_dtypes.float4_e2m1fn,
}


def stats_from(source: str, values: np.ndarray, formats=FORMATS) -> TensorStats:
    return stats_sources.stats_from(source, values, formats)


@functools.cache
def _reference(key: tuple, name: str):
    dtype, shape, data = key
    return block_reference(np.frombuffer(data, dtype=fmt.numpy_dtype(dtype)).reshape(shape), name)


def assert_blocks_match(stats: TensorStats, values: np.ndarray, rtol: float, formats=FORMATS):
    """Every block format's counts equal the reference's; its sums equal within ``rtol``."""
    key = (values.dtype.name, values.shape, np.ascontiguousarray(values).tobytes())
    for name in fmt.split_formats(formats)[1]:
        ref = _reference(key, name)
        block = stats.blocks[name]
        i = stats.formats.index(name)
        scales = {block.scale_lo + k: int(c) for k, c in enumerate(block.scales) if c}
        got = (
            int(stats.underflow[i]),
            int(stats.overflow[i]),
            block.zero_blocks,
            block.clamped_low,
            block.clamped_high,
            scales,
        )
        expected = (
            ref.underflow,
            ref.overflow,
            ref.zero_blocks,
            ref.clamped_low,
            ref.clamped_high,
            ref.scales,
        )
        assert got == expected, name
        unit = 4.0 ** (block.exponent - ref.exponent)
        np.testing.assert_allclose(block.signal * unit, ref.signal, rtol=rtol, err_msg=name)
        np.testing.assert_allclose(
            block.error * unit, ref.error, rtol=rtol, atol=rtol * ref.signal, err_msg=name
        )


# ----------------------------------------------------------------- crafted tensors


def _mx_edges(element) -> list[float]:
    """One block of an MX element's edges at scale 1 (amax = 2**emax): ties at its smallest
    subnormal (half of it rounds to 0, one and a half of it to two of it), values just
    around them, and its largest value with the tie above it and just below that."""
    info = ml_dtypes.finfo(element)
    tiny, largest = float(info.smallest_subnormal), float(info.max)
    step = largest - float(np.nextafter(np.array(largest, element), np.array(0, element)))
    return [
        2.0 ** (int(info.maxexp) - 1),
        tiny / 2,
        -tiny / 2,
        tiny * 1.5,
        tiny / 2 * (1 + 2**-20),
        tiny / 2 * (1 - 2**-20),
        tiny / 4,
        tiny,
        largest,
        largest + step / 2,
        -(largest + step / 2),
        largest + step / 2 * (1 - 2**-20),
    ]


def crafted_rows(dtype: str) -> np.ndarray:
    """Rows of 45 values (a short last block of 13) crafted to hit every edge, as ``dtype``
    (values it cannot hold become whatever the cast gives: still a valid tensor)."""
    rows = []
    for element in MX.values():
        edges = _mx_edges(element)
        rows.append(edges + [0.0] * (45 - len(edges)))
    powers = [2.0**k for k in range(-20, 25)]
    rows.append(powers)  # block maxima at powers of two, and just below them
    rows.append([p * (1 - 2**-24) for p in powers])
    rows.append([0.0] * 45)  # all-zero blocks
    nan_row = [float(k) - 20 for k in range(45)]
    nan_row[3], nan_row[7], nan_row[40] = np.nan, np.inf, -np.inf
    rows.append(nan_row)  # NaN/Inf inside blocks: no part in amax or counts
    rows.append([np.nan] * 32 + [np.inf] * 13)
    tiny32 = float(np.finfo(np.float32).smallest_subnormal)
    rows.append([tiny32 * (k + 1) for k in range(45)])  # float32 subnormals only
    rows.append([1.0] + [tiny32 * 3] * 31 + [2.0**-120] * 13)
    # nvfp4's E2M1 ties (a block whose amax is the tensor's: block scale 448)
    rows.append([6.0 * 2**10, 0.25 * 2**10, 0.75 * 2**10, 2.5 * 2**10, 5.0 * 2**10] + [3.0] * 40)
    values = np.array(rows, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return fmt.cast_array(values, fmt.numpy_dtype(dtype))


def huge_and_tiny_float64() -> np.ndarray:
    """float64 blocks whose MX scale clamps high and low, and float64 subnormals."""
    rows = [
        [2.0**200 * (1 + k / 64) for k in range(40)],
        [2.0**-200 * (1 + k / 64) for k in range(40)],
        [5e-324 * (k + 1) for k in range(40)],
        [2.0**1023 * 1.5] + [2.0**900] * 39,
    ]
    return np.array(rows, dtype=np.float64)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_crafted_values(source, dtype):
    if source.startswith("jax") and dtype == "float64":
        pytest.skip("jax computes in float32 unless x64 is enabled")
    values = crafted_rows(dtype)
    stats = stats_from(source, values)
    assert_blocks_match(
        stats, values, rtol=1e-5 if stats_sources.float32_sums(source, dtype) else 1e-12
    )


@pytest.mark.parametrize(
    "source", ["numpy", "torch", "torch-device-kernel", *set(DEVICE_SOURCES) & {"torch-cuda"}]
)
def test_float64_scales_that_clamp_and_float64_subnormals(source):
    values = huge_and_tiny_float64()
    stats = stats_from(source, values)
    assert_blocks_match(stats, values, rtol=1e-12)
    assert (
        stats.blocks["mxfp8_e4m3"].clamped_high == 4 and stats.blocks["mxfp4_e2m1"].clamped_low == 4
    )


def test_crafted_edges_are_counted_as_the_definitions_say():
    """A few counts worked out by hand, so that the reference itself is checked."""
    values = crafted_rows("float32")
    stats = engine.tensor_stats(values, FORMATS)
    e4m3 = FORMATS.index("mxfp8_e4m3")
    # e4m3's row: tiny/2 twice, tiny/4, and tiny/2 * (1 - 2**-20) become 0; no overflow
    # at 448 + 16 (a tie that rounds to 448, whose mantissa is even).
    e4m3_row = engine.tensor_stats(values[:1], FORMATS)
    assert e4m3_row.underflow[e4m3] == 4 and e4m3_row.overflow[e4m3] == 0
    # e5m2's largest value 57344 has an odd mantissa: the tie above it overflows.
    e5m2 = FORMATS.index("mxfp8_e5m2")
    e5m2_row = engine.tensor_stats(values[1:2], FORMATS)
    assert e5m2_row.overflow[e5m2] == 2
    # With the round-up rule nothing saturates.
    assert stats.overflow[FORMATS.index("mxfp8_e5m2:rceil")] == 0
    assert stats.blocks["mxfp4_e2m1"].zero_blocks >= 4


@pytest.mark.parametrize("shape", [(), (1,), (7,), (33,), (2, 3, 17), (3, 64), (5, 0)])
@pytest.mark.parametrize("source", SOURCES)
def test_zero_and_one_dimensional_and_partial_blocks(source, shape):
    rng = np.random.default_rng(len(shape) * 100 + sum(shape))
    values = np.asarray(rng.standard_normal(shape) * 2.0 ** rng.integers(-8, 8, shape), np.float32)
    stats = stats_from(source, values)
    assert_blocks_match(
        stats, values, rtol=1e-5 if stats_sources.float32_sums(source, "float32") else 1e-12
    )
    blocks = stats.blocks["mxfp4_e2m1"].blocks
    rows = int(np.prod(shape[:-1])) if shape else 1
    per_row = -(-shape[-1] // 32) if shape else 1
    assert blocks == rows * per_row


# ----------------------------------------------------------------- random tensors


def random_rows(dtype: str, seed: int) -> np.ndarray:
    """Rows of random length whose blocks span many binades, some values zero or NaN."""
    rng = np.random.default_rng(seed)
    rows, length = int(rng.integers(1, 9)), int(rng.integers(1, 120))
    scale = 2.0 ** rng.integers(-30, 30, size=(rows, 1)) * 2.0 ** rng.integers(
        -6, 6, (rows, length)
    )
    values = rng.standard_normal((rows, length)) * scale
    values[rng.random((rows, length)) < 0.05] = 0.0
    values[rng.random((rows, length)) < 0.01] = np.nan
    return fmt.cast_array(values, fmt.numpy_dtype(dtype))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_values(source, dtype, seed):
    if source.startswith("jax") and dtype == "float64":
        pytest.skip("jax computes in float32 unless x64 is enabled")
    values = random_rows(dtype, seed)
    stats = stats_from(source, values)
    assert_blocks_match(
        stats, values, rtol=1e-5 if stats_sources.float32_sums(source, dtype) else 1e-12
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("row_length", [4096, 45, 100_003])
@pytest.mark.parametrize("threads", [1, 3])
def test_cpu_kernel_blocks_across_its_chunks_and_threads(threads, row_length, dtype):
    """Long rows cut into several of the kernel's chunks, short rows grouped into one, and
    threads that split the array: blocks are never cut. (bfloat16's second sweep reads its
    patterns in place, its own path.)"""
    rng = np.random.default_rng(row_length)
    n = 140_000 // row_length * row_length or row_length
    values = rng.standard_normal(n) * 2.0 ** rng.integers(-10, 10, n)
    values = fmt.cast_array(values, fmt.numpy_dtype(dtype)).reshape(-1, row_length)
    formats = ("mxfp4_e2m1", "nvfp4", "mxfp8_e4m3:rceil")
    stats = engine.compute(values, formats, threads=threads).ready
    assert_blocks_match(stats, values, rtol=1e-12, formats=formats)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cpu_kernel_in_flush_to_zero_mode_counts_subnormals(dtype):
    values = crafted_rows(dtype)
    torch.set_flush_denormal(True)
    try:
        stats = engine.tensor_stats(values, FORMATS)
    finally:
        torch.set_flush_denormal(False)
    assert_blocks_match(stats, values, rtol=1e-12)


def test_merge_adds_counts_and_sums_exactly():
    """Two tensors merged (a module called twice, two ranks): counts add, the sums are
    rescaled to one unit and add, so the SNR is that of both tensors' values together."""
    a = random_rows("float32", 1)
    b = random_rows("float32", 2) * np.float32(2.0**20)
    merged = engine.tensor_stats(a, FORMATS).merge(engine.tensor_stats(b, FORMATS))
    for name in fmt.split_formats(FORMATS)[1]:
        ra, rb = block_reference(a, name), block_reference(b, name)
        block = merged.blocks[name]
        assert block.clamped_low == ra.clamped_low + rb.clamped_low
        assert block.zero_blocks == ra.zero_blocks + rb.zero_blocks
        signal = ra.signal * 4.0**ra.exponent + rb.signal * 4.0**rb.exponent
        error = ra.error * 4.0**ra.exponent + rb.error * 4.0**rb.exponent
        np.testing.assert_allclose(block.signal * 4.0**block.exponent, signal, rtol=1e-12)
        np.testing.assert_allclose(block.error * 4.0**block.exponent, error, rtol=1e-12)
        record = merged.to_record().blocks[name]
        assert record.snr_db == pytest.approx(10 * np.log10(signal / error), rel=1e-12)


def test_format_names_and_the_round_up_rule_are_checked():
    assert fmt.check_formats(["nvfp4", "float8_e4m3fn", "mxfp4_e2m1:rceil", "nvfp4"]) == (
        "float8_e4m3fn",
        "nvfp4",
        "mxfp4_e2m1:rceil",
    )
    for bad in ("nvfp4:rceil", "mxfp4_e2m1:ceil", "mxfp5_e2m2"):
        with pytest.raises(ValueError, match="format"):
            engine.compute(np.ones(3, np.float32), (bad,))
    stats = engine.tensor_stats(np.ones((2, 40), np.float32), ("mxfp8_e4m3", "mxfp8_e4m3:rceil"))
    floor, rceil = (stats.blocks[n].trimmed() for n in ("mxfp8_e4m3", "mxfp8_e4m3:rceil"))
    assert floor.scale_lo == -8 and rceil.scale_lo == -8  # 1.0: 2**0 / 2**8 either way
    # amax 460 > 448 * 2**0: the round-up rule takes 2**1, the OCP rule 2**0 (and saturates).
    stats = engine.tensor_stats(np.full(32, 460.0, np.float32), ("mxfp8_e4m3", "mxfp8_e4m3:rceil"))
    scale_los = [stats.blocks[n].trimmed().scale_lo for n in ("mxfp8_e4m3", "mxfp8_e4m3:rceil")]
    assert scale_los == [0, 1]


@pytest.mark.parametrize("fill", [0.0, np.nan])
@pytest.mark.parametrize("size", [40, 100_000])
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_tensor_with_no_finite_non_zero_value_has_no_error(source, dtype, size, fill):
    """Zero error and signal, every block a zero block (the CPU kernel once summed its
    errors in a unit that overflowed to infinity for such a tensor: NaN)."""
    if source.startswith("jax") and dtype == "float64":
        pytest.skip("jax computes in float32 unless x64 is enabled")
    if source == "torch-triton" and size > 40 and interpreting():
        pytest.skip("slow in Triton's interpreter: test_triton_kernel covers many tiles")
    values = fmt.cast_array(np.full(size, fill), fmt.numpy_dtype(dtype))
    stats = stats_from(source, values)
    assert_blocks_match(stats, values, rtol=1e-12)
    for name, block in stats.blocks.items():
        assert (block.error, block.signal, block.zero_blocks) == (0.0, 0.0, block.blocks), name
