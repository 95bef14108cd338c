"""The CPU kernel: compiled (numba) passes over a float32 or float64 array.

Array libraries need a dozen full passes (and temporaries) for what this does in three
reads of the data: (1) counts, exponent histogram, extremes and cast counts; (2) the scaled
power sums; (3) again, for the centred second moment (two-pass, so the standard deviation
stays exact for LayerNorm-like data). Narrower dtypes are widened to float32 first (exact).
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import os

import numba
import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.stats.record import TensorStats

_WORKERS = max(1, min(8, os.cpu_count() or 1))
_MIN_CHUNK = 1 << 16


@numba.njit(cache=True, nogil=True)
def _pass_counts(bits, sign_mask, inf_bits, mant_bits, thresholds, fields, casts):
    """Counts of the exponent fields (0: zeros and subnormals, all ones: Inf/NaN) into
    ``fields``, cast counts into ``casts`` [format, under/over]; returns the bit patterns of
    the largest, smallest and smallest non-zero finite |x| (>= ``inf_bits``: none).

    Decided on bit patterns alone, so a flush-to-zero mode (``torch.set_flush_denormal``)
    cannot hide subnormals; ``thresholds`` holds bit patterns too (for non-negative floats,
    their order is the values' order).
    """
    _count_fields(bits, sign_mask, mant_bits, fields)
    if len(thresholds):
        _count_casts(bits, sign_mask, inf_bits, thresholds, casts)
    zero = bits.dtype.type(0)
    largest, smallest, smallest_nonzero = zero, inf_bits, inf_bits
    for i in range(len(bits)):  # branch-free: vectorises
        magnitude = bits[i] & sign_mask
        largest = max(largest, magnitude if magnitude < inf_bits else zero)
        smallest = min(smallest, magnitude)
        smallest_nonzero = min(smallest_nonzero, magnitude if magnitude != zero else inf_bits)
    return largest, smallest, smallest_nonzero


@numba.njit(cache=True, nogil=True)
def _count_fields(bits, sign_mask, mant_bits, fields):
    """Adds the histogram of exponent fields to ``fields``, through four separate
    histograms (unrolled) so that runs of values in one binade do not wait on one counter."""
    h0, h1 = np.zeros(len(fields), np.int64), np.zeros(len(fields), np.int64)
    h2, h3 = np.zeros(len(fields), np.int64), np.zeros(len(fields), np.int64)
    whole = len(bits) // 4 * 4
    for i in range(0, whole, 4):
        h0[(bits[i] & sign_mask) >> mant_bits] += 1
        h1[(bits[i + 1] & sign_mask) >> mant_bits] += 1
        h2[(bits[i + 2] & sign_mask) >> mant_bits] += 1
        h3[(bits[i + 3] & sign_mask) >> mant_bits] += 1
    for i in range(whole, len(bits)):
        h0[(bits[i] & sign_mask) >> mant_bits] += 1
    fields += h0 + h1 + h2 + h3


@numba.njit(cache=True, nogil=True)
def _count_casts(bits, sign_mask, inf_bits, thresholds, casts):
    """Adds, per format, the values that become 0 and those that become Inf/NaN."""
    for f in range(thresholds.shape[0]):
        t = thresholds[f]
        if t[0] == t[1] and t[2] == t[3] and t[4] == t[5]:  # the same on both sides
            under, over = _count_casts_symmetric(bits, sign_mask, inf_bits, t[0], t[2], t[4])
        else:
            under = over = 0
            for i in range(len(bits)):
                magnitude = bits[i] & sign_mask
                side = 1 if bits[i] < 0 else 0
                nonzero_finite = (magnitude != 0) & (magnitude < inf_bits)
                under += nonzero_finite & (magnitude <= t[side])
                over += nonzero_finite & ((magnitude >= t[2 + side]) | (magnitude < t[4 + side]))
        zeros_overflow = 0
        if t[6]:
            for i in range(len(bits)):
                zeros_overflow += (bits[i] & sign_mask) == 0
        casts[f, 0] += under
        casts[f, 1] += over + zeros_overflow


@numba.njit(cache=True, nogil=True)
def _count_casts_symmetric(bits, sign_mask, inf_bits, under_max, over_min, nan_below):
    """(values that become 0, values that become Inf/NaN) for a format whose thresholds
    are the same for both signs: a branch-free loop on |x| that vectorises."""
    under = over = 0
    for i in range(len(bits)):
        magnitude = bits[i] & sign_mask
        nonzero_finite = (magnitude != 0) & (magnitude < inf_bits)
        under += nonzero_finite & (magnitude <= under_max)
        over += nonzero_finite & ((magnitude >= over_min) | (magnitude < nan_below))
    return under, over


@numba.njit(cache=True, nogil=True)
def _bit_length(value):
    """Number of bits of a positive integer: a subnormal with mantissa m has exponent
    ``bit_length(m) - bias - mantissa_bits``."""
    length = 0
    while value:
        value >>= 1
        length += 1
    return length


@numba.njit(cache=True, nogil=True)
def _rare_values(bits, sign_mask, inf_bits, mant_bits, bias, hist, hist_lo, special):
    """Histogram bins of the subnormals (into ``hist``) and [zero, nan, +inf, -inf] counts
    (into ``special``): a second look, only for arrays that hold such values."""
    for i in range(len(bits)):
        magnitude = bits[i] & sign_mask
        if magnitude == 0:
            special[0] += 1
        elif magnitude < (1 << mant_bits):
            hist[_bit_length(magnitude) - bias - mant_bits - hist_lo] += 1
        elif magnitude > inf_bits:
            special[1] += 1
        elif magnitude == inf_bits:
            special[2 if bits[i] > 0 else 3] += 1


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _power_sums(values, inverse, mean_s, out):
    """Adds sums of s, |s|, s**2, s**4, s**8 and (s - mean_s)**2 over the finite values
    (s = x * inverse) to out[0:6]. Reassociation lets the sums vectorise; NaN/Inf checks
    stay exact (no finite-math assumption)."""
    s1 = s_abs = s2 = s4 = s8 = m2 = 0.0
    for i in range(len(values)):
        x = np.float64(values[i])
        s = x * inverse if np.isfinite(x) else 0.0
        d = s - mean_s if np.isfinite(x) else 0.0
        q = s * s
        s1 += s
        s_abs += abs(s)
        s2 += q
        s4 += q * q
        s8 += (q * q) * (q * q)
        m2 += d * d
    out[0] += s1
    out[1] += s_abs
    out[2] += s2
    out[3] += s4
    out[4] += s8
    out[5] += m2


@numba.njit(cache=True, nogil=True)
def _summarise(values, bits, sign_mask, inf_bits, mant_bits, bias, hist_lo, n_bins, thresholds):
    """The counts vector (``record.engine_layout``), the moments vector less its three
    extremes, and the extremes as bit patterns, of one array."""
    fields = np.zeros((inf_bits >> mant_bits) + 1, np.int64)
    casts = np.zeros((thresholds.shape[0], 2), np.int64)
    extremes = _pass_counts(bits, sign_mask, inf_bits, mant_bits, thresholds, fields, casts)
    counts = np.zeros(5 + n_bins + 2 * thresholds.shape[0], np.int64)
    counts[0] = len(bits)
    hist = counts[5 : 5 + n_bins]
    for field in range(1, len(fields) - 1):  # normal binades: exponent = field - bias
        if fields[field]:
            hist[field - bias - hist_lo] += fields[field]
    if fields[0] or fields[-1]:
        _rare_values(bits, sign_mask, inf_bits, mant_bits, bias, hist, hist_lo, counts[1:5])
    counts[5 + n_bins :] = casts.reshape(-1)

    moments = np.zeros(7)
    # s = x * 2**-e with 2**e the power of two at or below max|x| (exact scaling; clamped
    # so that 2**-e stays a normal float64 for subnormal maxima)
    largest = extremes[0]
    exponent = 0
    if largest > 0:
        field = largest >> mant_bits
        exponent = field - bias
        if field == 0:
            exponent = _bit_length(largest) - bias - mant_bits
        exponent = max(-1022, exponent)
    moments[0] = math.ldexp(1.0, exponent)
    inverse = math.ldexp(1.0, -exponent)
    sums = np.zeros(6)
    _power_sums(values, inverse, 0.0, sums)
    finite = counts[0] - counts[2] - counts[3] - counts[4]
    mean_s = sums[0] / finite if finite > 0 else 0.0
    centred = np.zeros(6)
    _power_sums(values, inverse, mean_s, centred)  # two-pass: exact for LayerNorm-like data
    moments[1:6] = sums[:5]
    moments[6] = centred[5]
    return counts, moments, np.array(extremes, dtype=np.int64)


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(
        max_workers=_WORKERS, thread_name_prefix="tandv-stats"
    )


@functools.cache
def threshold_bits(dtype: str, formats: tuple[str, ...], wide: bool) -> np.ndarray:
    """The cast thresholds of ``formats`` as bit patterns of the compute dtype (float32, or
    float64 when ``wide``); the last column is 1 where 0 itself overflows. Read-only."""
    compute = (np.float64, np.int64) if wide else (np.float32, np.int32)
    table = np.zeros((len(formats), 7), np.int64)
    with fmt.gradual_underflow():
        for row, name in enumerate(formats):
            values = fmt.cast_thresholds(dtype, name).as_row()
            table[row, :6] = np.array(values[:6], dtype=compute[0]).view(compute[1])
            table[row, 6] = int(values[6])
    table.flags.writeable = False
    return table


@functools.cache
def _constants(dtype: str, formats: tuple[str, ...]) -> tuple:
    """The kernel's arguments after the arrays, for one dtype and format tuple."""
    wide = dtype == "float64"
    float_type, int_type = (np.float64, np.int64) if wide else (np.float32, np.int32)
    mant_bits, bias = (52, 1023) if wide else (23, 127)
    info = fmt.info(dtype)
    return (
        int_type(np.iinfo(int_type).max),
        np.array(np.inf, float_type).view(int_type)[()],
        mant_bits,
        bias,
        info.min_exponent,
        info.n_bins,
        threshold_bits(dtype, formats, wide),
    )


def compute_cpu(values: np.ndarray, dtype: str, formats: tuple[str, ...]) -> TensorStats:
    """Statistics of a host array of ``dtype`` whose values are given as float32 (any dtype
    narrower than float64, widened exactly) or float64. Large arrays are split over a few
    plain threads (the kernel drops the GIL; idle threads sleep, unlike an OpenMP pool
    that would spin against torch's) and the parts merged exactly."""
    values = np.ascontiguousarray(values).reshape(-1)
    bits = values.view(np.int64 if values.dtype == np.float64 else np.int32)
    constants = _constants(dtype, formats)
    chunks = min(_WORKERS, len(values) // _MIN_CHUNK)
    if chunks <= 1:
        return _unpack(values.dtype, dtype, formats, *_summarise(values, bits, *constants))
    bounds = np.linspace(0, len(values), chunks + 1).astype(np.int64)
    jobs = [
        _pool().submit(_summarise, values[lo:hi], bits[lo:hi], *constants)
        for lo, hi in zip(bounds[:-1], bounds[1:])
    ]
    parts = [_unpack(values.dtype, dtype, formats, *job.result()) for job in jobs]
    return functools.reduce(TensorStats.merge, parts)


def _unpack(compute_dtype, dtype, formats, counts, moments, extremes_bits) -> TensorStats:
    """TensorStats from the kernel's outputs: extremes turn from bit patterns into values
    (a pattern at or above Inf's means "none": 0 for the maximum, Inf for the minima)."""
    int_type = np.int64 if compute_dtype == np.float64 else np.int32
    extremes = extremes_bits.astype(int_type).view(compute_dtype).astype(np.float64)
    extremes[~np.isfinite(extremes)] = np.inf
    return TensorStats.unpack(dtype, formats, counts, np.concatenate([moments, extremes]))
