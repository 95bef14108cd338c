"""Exact cast thresholds: where casting a source dtype to an element format underflows or
overflows (``cast_thresholds``).

``underflow[F]`` and ``overflow[F]`` (docs/contract.md) are decided by thresholds found with
ml_dtypes itself: casting is monotone in each sign, so for a source dtype D the values that
become 0 in F form an interval ``0 < |x| <= under`` on each side of zero, and the values
that stay finite an interval around 1 (``|x| >= over`` overflows; in formats without a
zero, tiny values below ``nan_below`` become NaN too). The thresholds are found by a binary
search over D's bit patterns using real ``astype`` casts, so they agree with ml_dtypes
exactly, ties (round to nearest even) and every quirk included.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import ml_dtypes
import numpy as np

from tandv_tb.formats.dtypes import gradual_underflow, numpy_dtype


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
