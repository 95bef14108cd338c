"""Float dtypes and low-precision formats: exponent ranges and exact cast thresholds.

A *format* (or dtype) is any name ``ml_dtypes.finfo`` accepts: ``float32``, ``bfloat16``,
``float8_e4m3fn``, ``float4_e2m1fn``, ... ``formats=`` also takes the block-scaled formats
of ``tandv_tb.block_formats``; ``check_formats`` is the one place names are checked.

``underflow[F]`` and ``overflow[F]`` (docs/contract.md) are decided by thresholds found with
ml_dtypes itself: casting is monotone in each sign, so for a source dtype D the values that
become 0 in F form an interval ``0 < |x| <= under`` on each side of zero, and the values
that stay finite an interval around 1 (``|x| >= over`` overflows; in formats without a
zero, tiny values below ``nan_below`` become NaN too). The thresholds are found by a binary search
over D's bit patterns using real ``astype`` casts, so they agree with ml_dtypes exactly,
ties (round to nearest even) and every quirk included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import sys

import ml_dtypes
import numpy as np

from tandv_tb import block_formats

#: The low-precision formats the dashboards overlay when nothing else is asked for.
DEFAULT_OVERLAYS = ("float8_e4m3fn", "float8_e5m2")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype for a float format name; ``ValueError`` for anything else."""
    if not isinstance(name, str):
        raise TypeError(f"a format is named by a string, got {type(name).__name__}")
    candidate = getattr(ml_dtypes, name, None)
    try:
        dtype = np.dtype(candidate if candidate is not None else name)
        ml_dtypes.finfo(dtype)
    except (TypeError, ValueError, SyntaxError):  # numpy parses some names ("039") as code
        raise ValueError(
            f"unknown float format {name!r}: expected a name ml_dtypes.finfo accepts, "
            "such as 'float32', 'bfloat16' or 'float8_e4m3fn'"
        ) from None
    return dtype


def check_formats(formats: object) -> tuple[str, ...]:
    """The canonical names of the formats given to ``formats=`` (one name or a sequence):
    element formats by their ml_dtypes names, then block formats (``tandv_tb.block_formats``),
    each in the order given, repeats dropped. ``ValueError`` naming the first unknown one."""
    if isinstance(formats, str):
        formats = (formats,)
    try:
        names = tuple(formats)
    except TypeError:
        raise TypeError(
            f"formats must be a format name or a sequence of them, got {formats!r}"
        ) from None
    return _canonical_formats(names)


@functools.cache
def _canonical_formats(names: tuple) -> tuple[str, ...]:
    elements, blocks = split_formats(tuple(dict.fromkeys(map(_canonical_format, names))))
    return elements + blocks


def _canonical_format(name: object) -> str:
    if block_formats.is_block_format(name):
        return block_formats.block_format(name).name
    return numpy_dtype(name).name


def split_formats(formats: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(element formats, block formats) of canonical names, each in the order given."""
    blocks = tuple(f for f in formats if block_formats.is_block_format(f))
    return tuple(f for f in formats if f not in blocks), blocks


def canonical_name(dtype: object) -> str:
    """The ml_dtypes name of a numpy/torch/jax float dtype or of a format name."""
    text = str(dtype)
    for prefix in ("torch.", "dtype(", "<class 'numpy."):
        text = text.removeprefix(prefix)
    text = text.strip("')")
    return numpy_dtype(text).name


@dataclasses.dataclass(frozen=True)
class FormatInfo:
    """Exponent range and limits of one float format."""

    name: str
    bits: int
    min_exponent: int  # floor(log2(smallest subnormal)): the lowest histogram bin
    max_exponent: int  # floor(log2(largest finite)): the highest histogram bin
    smallest_subnormal: float
    smallest_normal: float
    max: float
    has_inf: bool
    has_nan: bool

    @property
    def n_bins(self) -> int:
        return self.max_exponent - self.min_exponent + 1


@functools.cache
def info(name: str) -> FormatInfo:
    """Exponent range and limits of the format ``name``."""
    dtype = numpy_dtype(name)
    with gradual_underflow():
        fi = ml_dtypes.finfo(dtype)
        specials = np.array([np.inf, np.nan], dtype=np.float32).astype(dtype)
        specials = specials.astype(np.float64)
        return FormatInfo(
            name=dtype.name,
            bits=int(fi.bits),
            min_exponent=int(fi.minexp) - int(fi.nmant),
            max_exponent=int(fi.maxexp) - 1,
            smallest_subnormal=math.ldexp(1.0, int(fi.minexp) - int(fi.nmant)),
            smallest_normal=float(fi.smallest_normal),
            max=float(fi.max),
            has_inf=bool(np.isinf(specials[0])),
            has_nan=bool(np.isnan(specials[1])),
        )


@contextlib.contextmanager
def gradual_underflow():
    """Compute with subnormals intact even if ``torch.set_flush_denormal(True)`` is on:
    the casts that define the thresholds must see subnormals as they are."""
    tiny = np.array([1], dtype=np.uint32).view(np.float32)
    flushing = bool((tiny * np.float32(1.0))[0] == 0)
    torch = sys.modules.get("torch")
    if not flushing or torch is None:
        yield
        return
    torch.set_flush_denormal(False)
    try:
        yield
    finally:
        torch.set_flush_denormal(True)


@dataclasses.dataclass(frozen=True)
class CastThresholds:
    """Where casting a source dtype to a format underflows or overflows.

    For x > 0: ``x`` becomes 0 iff ``x <= under_pos``; it becomes Inf/NaN iff
    ``x >= over_pos`` or ``x < nan_below_pos`` (formats without a zero, such as
    ``float8_e8m0fnu``, turn tiny values into NaN). For x < 0 the same with ``|x|`` and the
    ``_neg`` fields. ``under == 0`` means "never", ``over == inf`` "never",
    ``nan_below == 0`` "never". ``zero_overflows``: 0 itself becomes NaN. All thresholds are
    exactly representable in the source dtype.
    """

    under_pos: float
    under_neg: float
    over_pos: float
    over_neg: float
    nan_below_pos: float
    nan_below_neg: float
    zero_overflows: bool

    def as_row(self) -> tuple[float, ...]:
        """The seven fields as floats, in order (the kernels' threshold table)."""
        return tuple(float(v) for v in dataclasses.astuple(self))


def cast_array(values: np.ndarray, target: np.dtype) -> np.ndarray:
    """``values.astype(target)``; via float32 where ml_dtypes has no direct cast (exact:
    every such source dtype is narrower than float32)."""
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            return values.astype(target)
        except TypeError:
            return values.astype(np.float32).astype(target)


_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _positive_finite_patterns(source: np.dtype) -> tuple[int, int]:
    """Bit patterns of the smallest and largest positive finite values of ``source``."""
    fi = ml_dtypes.finfo(source)
    uint = _UINT_OF_SIZE[source.itemsize]
    bounds = np.array([fi.smallest_subnormal, fi.max], dtype=source).view(uint)
    return int(bounds[0]), int(bounds[1])


def _first_true(lo: int, hi: int, predicate) -> int:
    """Smallest k in [lo, hi] with predicate(k) true, hi + 1 if none (predicate monotone)."""
    if not predicate(hi):
        return hi + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


@functools.cache
def cast_thresholds(source: str, target: str) -> CastThresholds:
    """Exact underflow/overflow thresholds for casting dtype ``source`` to ``target``."""
    with gradual_underflow():
        return _search_thresholds(source, target)


def _search_thresholds(source: str, target: str) -> CastThresholds:
    src, dst = numpy_dtype(source), numpy_dtype(target)
    uint = _UINT_OF_SIZE[src.itemsize]
    lo, hi = _positive_finite_patterns(src)

    def cast(pattern: int, sign: float) -> float:
        value = np.array([pattern], dtype=uint).view(src) * np.array(sign, dtype=src)
        return float(cast_array(value, dst).astype(np.float64)[0])

    def value_of(pattern: int) -> float:
        return float(np.array([pattern], dtype=uint).view(src).astype(np.float64)[0])

    one = int(np.array([1.0], dtype=src).view(uint)[0])

    def side(sign: float) -> tuple[float, float, float]:
        """(under, over, nan_below) for one sign: cast values are finite on an interval
        around 1, zero below ``under`` and non-finite outside the interval."""
        if not math.isfinite(cast(one, sign)):  # e.g. negatives in an unsigned format
            return 0.0, value_of(lo), 0.0
        first_nonzero = _first_true(lo, one, lambda p: cast(p, sign) != 0.0)
        under = value_of(first_nonzero - 1) if first_nonzero > lo else 0.0
        first_finite = _first_true(lo, one, lambda p: math.isfinite(cast(p, sign)))
        nan_below = value_of(first_finite) if first_finite > lo else 0.0
        first_overflow = _first_true(one, hi, lambda p: not math.isfinite(cast(p, sign)))
        over = value_of(first_overflow) if first_overflow <= hi else math.inf
        return under, over, nan_below

    under_pos, over_pos, nan_pos = side(1.0)
    under_neg, over_neg, nan_neg = side(-1.0)
    zero_cast = cast_array(np.zeros(1, dtype=src), dst).astype(np.float64)[0]
    return CastThresholds(
        under_pos, under_neg, over_pos, over_neg, nan_pos, nan_neg, not np.isfinite(zero_cast)
    )
