"""The statistics engine against the independent numpy/ml_dtypes reference.

Every source (numpy, torch on the CPU kernel, torch on the accelerator kernel run on the
CPU, jax, jax under ``jax.jit`` (on the CPU: the CPU kernel as an XLA FFI call), the
accelerator kernel under ``jax.jit``) and every float dtype, on crafted and on random
tensors.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

from tandv_tb import formats as fmt
from tandv_tb.stats import engine
from tandv_tb.stats.tensor_stats import TensorStats
from tests.helpers import stats_sources
from tests.helpers.devices import DEVICE_SOURCES
from tests.helpers.reference import assert_matches, crafted, random_binades, reference, torch_tensor
from tests.helpers.triton_source import TRITON_SOURCES, interpreting

DTYPES = ["float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]
FORMATS = (
    "float8_e4m3fn",
    "float8_e5m2",
    "float16",
    "bfloat16",
    "float4_e2m1fn",
    "float6_e3m2fn",
    "float8_e8m0fnu",
)
SOURCES = [
    "numpy",
    "torch",
    "torch-device-kernel",
    "jax",
    "jax-jit",
    "jax-jit-device-kernel",
    *TRITON_SOURCES,
    *DEVICE_SOURCES,
]


def stats_from(source: str, values: np.ndarray, formats=FORMATS) -> TensorStats:
    return stats_sources.stats_from(source, values, formats)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_crafted_values(source, dtype):
    if source.startswith("jax") and dtype == "float64":
        pytest.skip("jax computes in float32 unless x64 is enabled")
    values = crafted(dtype)
    stats = stats_from(source, values)
    assert_matches(
        stats, values, FORMATS, rtol=1e-5 if stats_sources.float32_sums(source, dtype) else 1e-9
    )


@functools.cache
def _random(dtype: str) -> tuple[np.ndarray, dict]:
    values = random_binades(dtype, 2_000_000, binades=60, seed=DTYPES.index(dtype))
    return values, reference(values, FORMATS)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_millions_spanning_60_binades(source, dtype):
    if source.startswith("jax") and dtype == "float64":
        pytest.skip("jax computes in float32 unless x64 is enabled")
    if source == "torch-triton" and interpreting():
        pytest.skip("minutes in Triton's interpreter: test_triton_kernel reads every pattern")
    values, ref = _random(dtype)
    stats = stats_from(source, values)
    rtol = 1e-4 if stats_sources.float32_sums(source, dtype) else 1e-9
    assert_matches(stats, values, FORMATS, rtol, ref)


def test_cpu_kernel_counts_past_a_flush_of_its_int32_counters():
    """The kernel counts keys in int32 tables that it adds into int64 totals every
    ``_FLUSH_BLOCKS`` blocks: an array that spans a flush is counted exactly."""
    from tandv_tb.stats import _cpu_kernel

    n = _cpu_kernel._FLUSH_BLOCKS * _cpu_kernel._BLOCK + 12_345
    values = random_binades("float32", n, binades=40, seed=7)
    values[::1001] = 0.0
    stats = engine.compute(values, (), threads=1).ready
    exponents = np.frexp(values[values != 0].astype(np.float64))[1] - 1
    bins, counts = np.unique(exponents, return_counts=True)
    assert stats.numel == n and stats.zero_count == np.count_nonzero(values == 0)
    assert stats.to_record().exponent_histogram() == dict(zip(bins.tolist(), counts.tolist()))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_cpu_kernel_gives_the_same_answer_on_any_number_of_threads(threads):
    values, ref = _random("float32")
    stats = engine.compute(values, FORMATS, threads=threads).ready
    assert_matches(stats, values, FORMATS, 1e-9, ref)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("shape", [(0,), (0, 3), ()])
def test_empty_and_zero_dim(source, shape):
    values = np.full(shape, 2.5, dtype=np.float32)
    record = stats_from(source, values).to_record()
    assert record.numel == values.size
    if values.size == 0:
        assert all(math.isnan(v) for v in record.statistics.values())
        assert len(record.counts) == 0
    else:
        assert record.statistics["mean"] == 2.5 and record.statistics["std"] == 0.0
        assert record.exponent_histogram() == {1: 1}


@pytest.mark.parametrize("size", [0, 1, 16_383, 16_385, 3 * 65_536 + 7])
def test_bfloat16_is_read_as_bit_patterns_in_blocks(size):
    """The CPU kernel reads bfloat16 through its uint16 patterns, widening one block at a
    time: every size around a block's and a thread part's, and strided torch tensors,
    match the reference."""
    values = random_binades("bfloat16", size, binades=60, seed=size)
    values[:: max(1, size // 5)] = np.array(np.nan, np.float32).astype(values.dtype)
    for threads in (1, 2):
        stats = engine.compute(values, FORMATS, threads=threads).ready
        assert_matches(stats, values, FORMATS, rtol=1e-9)
    column = torch_tensor(np.stack([values, values], axis=1))[:, 1]  # stride 2
    assert not column.is_contiguous() or size <= 1
    assert_matches(engine.tensor_stats(column, FORMATS), values, FORMATS, rtol=1e-9)


@pytest.mark.parametrize("source", SOURCES)
def test_no_finite_value_gives_counts_and_nan(source):
    values = np.array([np.nan, np.inf, -np.inf, np.nan], dtype=np.float32)
    record = stats_from(source, values).to_record()
    assert (record.nan_count, record.posinf_count, record.neginf_count) == (2, 1, 1)
    assert all(math.isnan(v) for v in record.statistics.values())


@pytest.mark.parametrize("source", SOURCES)
def test_contract_cast_examples(source):
    values = np.array([464, 470, 2.0**-10, 3 * 2.0**-11, -464, -470], dtype=np.float32)
    record = stats_from(source, values, ("float8_e4m3fn",)).to_record()
    assert record.overflow == {"float8_e4m3fn": 2}  # 470 -> NaN, 464 -> 448
    assert record.underflow == {"float8_e4m3fn": 1}  # 2**-10 -> 0, 3*2**-11 -> 2**-9


@pytest.mark.parametrize("source", SOURCES)
def test_no_intermediate_overflow_and_stable_std(source):
    big = np.full(1000, 1e5, dtype=np.float32)
    assert stats_from(source, big).to_record().statistics["rm8"] == pytest.approx(1e5, rel=1e-6)
    huge = np.full(1000, 3e38, dtype=np.float32)
    stats = stats_from(source, huge).to_record().statistics
    assert stats["mean"] == pytest.approx(3e38, rel=1e-6)
    assert stats["rm8"] == pytest.approx(3e38, rel=1e-6)
    layer_norm = (1 + 1e-4 * np.random.default_rng(1).standard_normal(4096)).astype(np.float32)
    got = stats_from(source, layer_norm).to_record().statistics["std"]
    assert got == pytest.approx(layer_norm.astype(np.float64).std(), rel=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("first", [1e30, -3.0, 1e-30])
def test_moments_where_a_blocks_first_value_is_far_from_the_rest(dtype, first):
    """The CPU kernel sums d = s - shift (the shift being a block's first finite value)
    and derives the sums of s and s**2 from those of d: still exact to float64 rounding
    where the shift is an outlier, in a block of zeros, of tiny values or of 1 + noise."""
    rng = np.random.default_rng(5)
    for rest in (
        np.zeros(40_000),
        1e-6 * rng.standard_normal(40_000),
        1 + 1e-6 * rng.standard_normal(40_000),
    ):
        values = np.concatenate([[first], rest, [first]]).astype(dtype)
        assert_matches(engine.tensor_stats(values, FORMATS), values, FORMATS, rtol=1e-9)


def test_torch_float8_and_noncontiguous_tensors():
    base = torch.randn(64, 48) * 100
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float16):
        tensor = base.to(dtype)
        record = engine.tensor_stats(tensor.t(), FORMATS).to_record()
        values = tensor.t().float().numpy().astype(fmt.numpy_dtype(str(dtype)[6:]))
        assert record.exponent_histogram() == reference(values)["bins"]
    strided = base[::2, 1::3]
    record = engine.tensor_stats(strided).to_record()
    assert record.numel == strided.numel()
    assert record.statistics["max_abs"] == float(strided.abs().max())
    expanded = torch.randn(5, 1).expand(5, 7)
    assert engine.tensor_stats(expanded).to_record().numel == 35


def test_requires_grad_tensor_is_read_without_changing_it():
    weight = torch.randn(10, requires_grad=True)
    before = weight.detach().clone()
    engine.tensor_stats(weight)
    assert torch.equal(weight.detach(), before) and weight.grad is None


def test_many_tensors_one_fetch_and_merge_is_exact():
    rng = np.random.default_rng(3)
    parts = [rng.standard_normal(n).astype(np.float32) * 10.0**k for n, k in [(100, 0), (7, 3)]]
    pending = [engine.compute(torch.from_numpy(p), FORMATS) for p in parts]
    first, second = engine.fetch(pending)
    merged = first.merge(second)
    assert_matches(merged, np.concatenate(parts), FORMATS, rtol=1e-9)


@pytest.mark.parametrize(
    "value",
    [
        np.arange(5),
        np.array([True, False]),
        np.array([1 + 2j]),
        torch.arange(5),
        torch.tensor([True]),
        torch.tensor([1 + 2j]),
        jnp.arange(3),
        "text",
        None,
        [1.0, 2.0],
        3.5,
    ],
    ids=repr,
)
def test_non_float_input_raises_type_error_naming_it(value):
    with pytest.raises(TypeError) as error:
        engine.compute(value)
    message = str(error.value)
    assert "float" in message or "got" in message


def test_meta_and_sparse_tensors_raise_type_error():
    with pytest.raises(TypeError, match="meta"):
        engine.compute(torch.empty(3, device="meta"))
    with pytest.raises(TypeError, match="sparse"):
        engine.compute(torch.eye(3).to_sparse())


@pytest.mark.parametrize("name", ["float9", "039", ""])
def test_unknown_format_is_a_value_error(name):
    with pytest.raises(ValueError, match="unknown float format"):
        engine.compute(np.ones(3, np.float32), (name,))


def test_format_bins_match_contract():
    expected = {
        "float32": (-149, 127),
        "bfloat16": (-133, 127),
        "float16": (-24, 15),
        "float8_e4m3fn": (-9, 8),
    }
    for name, (lo, hi) in expected.items():
        info = fmt.info(name)
        assert (info.min_exponent, info.max_exponent) == (lo, hi)


def test_ml_dtypes_names_are_accepted_as_formats():
    names = [n for n in dir(ml_dtypes) if n.startswith(("float", "bfloat"))]
    record = engine.tensor_stats(np.linspace(-500, 500, 101, dtype=np.float32), names)
    assert set(record.to_record().underflow) == {fmt.numpy_dtype(n).name for n in names}


@pytest.mark.parametrize("source", SOURCES)
def test_all_subnormal_tensor_keeps_its_statistics(source):
    values = np.array([1e-40, -3e-41, 2e-45, 0.0, 5e-39], dtype=np.float32)
    assert_matches(stats_from(source, values), values, FORMATS, rtol=1e-6)


@pytest.mark.parametrize(
    "values",
    [
        crafted("float32"),
        crafted("float64"),
        np.array([1e-40, -3e-41, 2e-45, 0.0, 5e-39], dtype=np.float32),
        np.array([1.5e-38, 1e-40, -3e-41, 1.2e-38, np.nan], dtype=np.float32),
    ],
)
def test_flush_denormal_mode_does_not_hide_subnormals(values):
    """With subnormal operands read as 0 (``torch.set_flush_denormal``; XLA's CPU threads
    run so too) counts, bins and statistics still see every subnormal."""
    torch.set_flush_denormal(True)
    try:
        stats = engine.tensor_stats(torch_tensor(values), FORMATS)
    finally:
        torch.set_flush_denormal(False)
    assert_matches(stats, values, FORMATS, rtol=1e-9)


def test_jit_on_the_cpu_runs_the_cpu_kernel_as_an_ffi_call():
    """Lowered for the CPU (one device), a jitted ``engine.compute`` calls the compiled CPU
    kernel (an XLA custom call), not the array kernel's scatter."""
    hlo = stats_sources.jitted(FORMATS[:2]).lower(jnp.zeros(1000, jnp.float32)).as_text()
    assert "tandv_stats_float32" in hlo and "scatter" not in hlo
    device_hlo = (
        stats_sources.jitted_device_kernel("float32", FORMATS[:2]).lower(jnp.zeros(1000)).as_text()
    )
    assert "tandv_stats" not in device_hlo


_X64_CHECK = """
import jax, jax.numpy as jnp, numpy as np
from tandv_tb.stats import engine
from tandv_tb.stats.tensor_stats import TensorStats
from tests.helpers import stats_sources
from tests.helpers.devices import DEVICE_SOURCES
from tests.helpers.reference import assert_matches, crafted
formats = ("float8_e4m3fn", "bfloat16", "float8_e8m0fnu")
for dtype in ("float64", "float32", "bfloat16"):
    values = crafted(dtype)
    counts, moments = jax.jit(
        lambda x: (lambda p: (p.counts, p.moments))(engine.compute(x, formats))
    )(jnp.asarray(values))
    assert counts.dtype == jnp.int64 and moments.dtype == jnp.float64, (counts, moments)
    stats = TensorStats.unpack(dtype, formats, np.asarray(counts), np.asarray(moments))
    assert_matches(stats, values, formats, rtol=1e-9)
print("ok")
"""


def test_jit_with_x64_gives_float64_statistics(tmp_path):
    """Under ``jax_enable_x64`` the FFI call hands out int64 counts and float64 moments:
    float64 arrays and float32 ones match the reference to float64 rounding."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "JAX_ENABLE_X64": "1", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", _X64_CHECK], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_device_kernel_counts_the_same_where_torch_must_be_deterministic(dtype):
    """The torch array kernel counts its keys by ``histc``, which torch refuses on CUDA in
    deterministic mode; there it scatters instead, to the same counts."""
    values, ref = _random(dtype)
    formats = (*FORMATS, "mxfp4_e2m1", "nvfp4")
    torch.use_deterministic_algorithms(True)
    try:
        stats = stats_from("torch-device-kernel", values, formats)
    finally:
        torch.use_deterministic_algorithms(False)
    assert_matches(stats, values, FORMATS, 1e-4, ref)
    assert stats.to_record() == stats_from("torch-device-kernel", values, formats).to_record()
