"""Property tests of the statistics engine against the independent reference.

For every source the engine accepts here (numpy arrays, torch CPU tensors, jax arrays and
jax tracers under ``jax.jit``), every float dtype of that source, any shape and memory layout
(steps, transposes, broadcast/expand, channels_last, negative strides, 0-d, empty) and value
mixes holding zeros of both signs, subnormals, NaN, +-Inf, the extremes and random bit
patterns (so exponents across the whole range): no exception, and counts, bins and casts
equal to ``tests.helpers.reference`` exactly, statistics within a relative tolerance.

Runs are reproducible: ``derandomize=True`` and no example database.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tandv_tb import formats as fmt
from tandv_tb.formats import numpy_dtype
from tandv_tb.stats import engine
from tandv_tb.stats.tensor_stats import TensorStats
from tests.helpers.reference import assert_matches, torch_tensor

ML_DTYPES = sorted(n for n in dir(ml_dtypes) if n.startswith(("float", "bfloat")))
NUMPY_DTYPES = ["float64", "float32", "float16", *ML_DTYPES]
TORCH_DTYPES = [
    n for n in NUMPY_DTYPES if isinstance(getattr(torch, n, None), torch.dtype)
]  # float64 .. float8_e8m0fnu (torch's packed float4_e2m1fn_x2 is no element type)
# jax without x64 has no float64; XLA on the CPU cannot hold the float6 types.
JAX_DTYPES = [n for n in NUMPY_DTYPES if n != "float64" and not n.startswith("float6")]
FORMATS = NUMPY_DTYPES  # any name ml_dtypes.finfo accepts

COMMON = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _special_bits(name: str) -> list[int]:
    """Bit patterns of 0, -0, NaN, +-Inf, +-max, +-smallest normal, +-smallest subnormal
    (those the dtype can hold)."""
    dtype = numpy_dtype(name)
    fi = ml_dtypes.finfo(dtype)
    values = [0.0, -0.0, math.nan, math.inf, -math.inf]
    for v in (fi.max, fi.smallest_normal, fi.smallest_subnormal):
        values += [float(v), -float(v)]
    with np.errstate(over="ignore", invalid="ignore"):
        cast = np.array(values, dtype=np.float64).astype(dtype)
    return sorted({int(b) for b in cast.view(_UINT[dtype.itemsize])})


@st.composite
def _values(draw, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A ``name`` array of ``shape`` from a mix of special values, subnormals and random bit
    patterns (uniform over the patterns: exponents across the whole range)."""
    dtype = numpy_dtype(name)
    fi = ml_dtypes.finfo(dtype)
    sign = 1 << (fi.bits - 1)
    kinds = [st.sampled_from(_special_bits(name)), st.integers(0, 2**fi.bits - 1)]
    if fi.nmant > 0 and float(fi.smallest_subnormal) < float(fi.smallest_normal):
        subnormal = st.integers(1, 2**fi.nmant - 1)
        kinds.append(st.builds(lambda m, s: m | s, subnormal, st.sampled_from([0, sign])))
    size = math.prod(shape)
    bits = draw(st.lists(st.one_of(kinds), min_size=size, max_size=size))
    return np.array(bits, dtype=_UINT[dtype.itemsize]).view(dtype).reshape(shape)


@st.composite
def _layout(draw, shape: tuple[int, ...], torch_ops: bool) -> list[tuple]:
    """Up to 3 view operations applied in turn (``_apply``); each keeps the values a view."""
    ops = []
    for _ in range(draw(st.integers(0, 3))):
        ndim = len(shape)
        choices = ["expand"] + (["permute", "slice"] if ndim else [])
        choices += ["flip"] if ndim and not torch_ops else []
        choices += ["channels_last"] if torch_ops and ndim == 4 else []
        kind = draw(st.sampled_from(choices))
        if kind == "permute":
            perm = tuple(draw(st.permutations(range(ndim))))
            ops.append((kind, perm))
            shape = tuple(shape[i] for i in perm)
        elif kind == "slice":
            axis = draw(st.integers(0, ndim - 1))
            start, step = draw(st.integers(0, 2)), draw(st.integers(1, 3))
            ops.append((kind, axis, start, step))
            shape = shape[:axis] + (len(range(start, shape[axis], step)),) + shape[axis + 1 :]
        elif kind == "flip":
            ops.append((kind, draw(st.integers(0, ndim - 1))))
        elif kind == "expand" and ndim < 5:
            axis, copies = draw(st.integers(0, ndim)), draw(st.integers(0, 3))
            ops.append((kind, axis, copies))
            shape = shape[:axis] + (copies,) + shape[axis:]
        elif kind == "channels_last":
            ops.append((kind,))
    return ops


def _apply(x, ops: list[tuple]):
    """The view operations on a numpy array, jax array or jax tracer, or a torch tensor."""
    is_torch = isinstance(x, torch.Tensor)
    xp = jnp if isinstance(x, jax.Array) else np
    for op in ops:
        kind = op[0]
        if kind == "permute":
            x = x.permute(op[1]) if is_torch else xp.transpose(x, op[1])
        elif kind == "slice":
            _, axis, start, step = op
            x = x[(slice(None),) * axis + (slice(start, None, step),)]
        elif kind == "flip":
            x = xp.flip(x, op[1])
        elif kind == "expand":
            _, axis, copies = op
            shape = (*x.shape[:axis], copies, *x.shape[axis:])
            if is_torch:
                x = x.unsqueeze(axis).expand(shape)
            else:
                x = xp.broadcast_to(xp.expand_dims(x, axis), shape)
        elif kind == "channels_last" and is_torch:
            x = x.contiguous(memory_format=torch.channels_last)
    return x


_SHAPES = st.lists(st.integers(0, 5), max_size=4).map(tuple)


@st.composite
def _case(draw, dtypes: list[str], torch_ops: bool = False):
    """(dtype name, base array, view operations, formats)."""
    name = draw(st.sampled_from(dtypes))
    shape = draw(_SHAPES)
    values = draw(_values(name, shape))
    ops = draw(_layout(shape, torch_ops))
    formats = tuple(draw(st.lists(st.sampled_from(FORMATS), max_size=4, unique=True)))
    return name, values, ops, formats


def _check(stats: TensorStats, expected: np.ndarray, formats, rtol: float) -> None:
    assert_matches(stats, np.ascontiguousarray(expected), formats, rtol)


@pytest.mark.slow
@settings(max_examples=150, **COMMON)
@given(_case(NUMPY_DTYPES))
def test_numpy_arrays_of_every_dtype_and_layout(case):
    name, values, ops, formats = case
    view = _apply(values, ops)
    _check(engine.tensor_stats(view, formats), view, formats, rtol=1e-9)


@settings(max_examples=150, **COMMON)
@given(_case(TORCH_DTYPES, torch_ops=True))
def test_torch_cpu_tensors_of_every_dtype_and_layout(case):
    name, values, ops, formats = case
    tensor = _apply(torch_tensor(values), ops)
    _check(engine.tensor_stats(tensor, formats), _apply(values, ops), formats, rtol=1e-9)


@settings(max_examples=60, **COMMON)
@given(_case(JAX_DTYPES))
def test_jax_arrays_of_every_dtype_and_layout(case):
    name, values, ops, formats = case
    array = _apply(jnp.asarray(values), ops)
    _check(engine.tensor_stats(array, formats), _held(array), formats, rtol=1e-9)


def _held(array: jax.Array) -> np.ndarray:
    """The values a jax array holds. Not ``_apply(values, ops)``: XLA on the CPU flushes
    bfloat16 subnormals to zero in some operations (``broadcast_to``), before the engine
    sees them."""
    return np.asarray(array)


def _traced(ops: list[tuple], formats: tuple[str, ...]):
    def kernel(x):
        pending = engine.compute(_apply(x, ops), formats)
        return pending.counts, pending.moments

    return jax.jit(kernel)


_TINY = np.finfo(np.float32).smallest_normal


@settings(max_examples=25, **COMMON)
@given(_case(JAX_DTYPES))
# the largest value a normal near the bottom, the others subnormal: XLA flushes subnormal
# operands to zero on the CPU, so scaling them as floats loses them
@example(("float32", np.array([_TINY, np.nextafter(_TINY, 0)], np.float32), [], ()))
def test_jax_tracers_under_jit_of_every_dtype_and_layout(case):
    name, values, ops, formats = case
    array = jnp.asarray(values)
    counts, moments = _traced(ops, formats)(array)
    stats = TensorStats.unpack(name, fmt.check_formats(formats), *jax.device_get((counts, moments)))
    held = _held(jax.jit(lambda x: _apply(x, ops))(array))
    _check(stats, held, formats, rtol=1e-4)  # float32 sums on the device


def test_the_special_values_are_in_the_mix():
    """The generator's special patterns hold what the docstring promises (guards it)."""
    f32 = np.array(_special_bits("float32"), np.uint32).view(np.float32)
    assert np.isnan(f32).any() and np.isposinf(f32).any() and np.isneginf(f32).any()
    assert (np.signbit(f32) & (f32 == 0)).any() and (~np.signbit(f32) & (f32 == 0)).any()
    fi = np.finfo(np.float32)
    for v in (fi.max, fi.smallest_normal, fi.smallest_subnormal):
        assert (f32 == v).any() and (f32 == -v).any()
    e4m3 = np.array(_special_bits("float8_e4m3fn"), np.uint8).view(ml_dtypes.float8_e4m3fn)
    assert len(e4m3) == 10  # no Inf: +-NaN, +-0, +-448, +-2**-6, +-2**-9
