"""The CPU kernel: one compiled (numba) read of a float32 or float64 array.

The array is taken in blocks small enough to stay in the core's caches. Each block is
read from memory once and then scanned a few times from the cache: (1) the histogram of
sign-and-exponent keys (four unrolled int32 tables); (2) a branch-free scan of the bit
patterns for the extremes (and, only in blocks that the histogram shows to hold zeros,
subnormals, NaN or Inf, their counts); (3) per format, two branch-free threshold counts
that give the values that cast to 0 or to Inf/NaN; (4) the block's power sums, scaled by a
power of two at its maximum, in parts each shifted by one of its values (so the second
moment about the mean stays exact for LayerNorm-like data); (5) for block-scaled formats,
their blocks (``_cpu_blocks``). Blocks merge into running sums (Chan et al. for the second
moment). With block-scaled formats the array's blocks begin and end on their blocks'
boundaries along the rows (``_chunk_end``), and one first pass finds the largest finite
magnitude (nvfp4's per-tensor scale). Subnormals are read through their bit patterns, so a CPU in
flush-to-zero mode (XLA's threads) counts them all the same.
bfloat16 is read through its 16-bit patterns, widened a block at a time into a float32
buffer; other narrower dtypes are widened to float32 first (exact).

numba widens integer arithmetic narrower than 64 bits to 64 bits; the loops over bit
patterns (extremes, threshold counts) use ``_same_width_*`` intrinsics instead, so that
they vectorise over as many lanes as the patterns allow.
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import os

import numba
import numpy as np

from tandv_tb.formats import info
from tandv_tb.formats.blocks import LARGEST_BLOCK, NVFP4, NVFP4_BLOCK
from tandv_tb.formats.kernel_tables import block_table, threshold_bits
from tandv_tb.stats import _block_scales, _cpu_blocks
from tandv_tb.stats._bit_ops import (
    _same_width_add,
    _same_width_and,
    _same_width_at_most,
    _same_width_below,
    _same_width_max,
    _same_width_min,
)
from tandv_tb.stats.tensor_stats import TensorStats

_CORES = max(1, min(8, os.cpu_count() or 1))
_MIN_PART = 1 << 16

#: Values per block: 256 KiB of float32, read from memory once and then scanned a few
#: times from the L2 cache. Each block has a fixed cost (the calls that pass the running
#: sums on), which larger blocks spread: measured, 16,384 values 8% faster than 4,096, and
#: 65,536 faster again by 0.02-0.03 ns a value without formats and 0.05-0.08 ns with nvfp4,
#: whose second sweep pays that cost again (bench/RESULTS.md, 2026-11-26).
_BLOCK = 65536
#: Values per part of a block whose moments are summed apart, each shifted by its own first
#: value: the rounding of those sums grows with their length (a part of 65,536 values led
#: by an outlier gave the std to 1.2e-9 instead of better than 1e-9).
_MOMENTS_PART = 16384
#: Blocks between two flushes of the int32 key counts into int64 totals (far fewer than
#: 2**31 values reach one counter in between; a flush adds 4 x 512 or 4 x 4,096 counters).
_FLUSH_BLOCKS = 256
#: Scale exponent of running sums that have seen no non-zero value yet.
_NO_SCALE = -1100
#: float32 and float64 bit patterns: |x| mask, Inf.
_FLOAT32_SIGN_MASK, _FLOAT32_INF = np.int32(0x7FFFFFFF), np.int32(0x7F800000)
_FLOAT64_MASKS = (np.int64(0x7FFFFFFFFFFFFFFF), np.int64(0x7FF0000000000000))
#: Values per block of the largest block-scaled format: the array's blocks begin on a
#: multiple of it within a row.
_SCALE_BLOCK = LARGEST_BLOCK


@numba.njit(cache=True, nogil=True)
def _count_keys(keys_bits, keys):
    """Adds the histogram of sign-and-exponent keys (the bit pattern's top bits: 512 keys
    for float32, 4,096 for float64) to the four rows of ``keys``."""
    if keys_bits.itemsize == 4:  # constant shifts: a third faster than variable ones
        _count_keys_of(keys_bits, 23, keys)
    else:
        _count_keys_of(keys_bits, 52, keys)


@numba.njit(cache=True, nogil=True, inline="always")
def _count_keys_of(keys_bits, mant_bits, keys):
    """Four histograms (unrolled), so that runs of values in one binade do not wait on one
    counter; unsigned bits need no mask, and int32 counters keep the tables small."""
    whole = len(keys_bits) // 4 * 4
    for i in range(0, whole, 4):
        keys[0, keys_bits[i] >> mant_bits] += 1
        keys[1, keys_bits[i + 1] >> mant_bits] += 1
        keys[2, keys_bits[i + 2] >> mant_bits] += 1
        keys[3, keys_bits[i + 3] >> mant_bits] += 1
    for i in range(whole, len(keys_bits)):
        keys[0, keys_bits[i] >> mant_bits] += 1


@numba.njit(cache=True, nogil=True)
def _extremes(bits, sign_mask):
    """The largest and the smallest |x| as bit patterns, for a block of finite non-zero
    normal values: two branch-free reductions in the patterns' own width (they vectorise
    to 8 lanes for float32; 2.2x faster than numba's widened ``max``)."""
    largest = smallest = _same_width_and(bits[0], sign_mask)
    for i in range(len(bits)):
        magnitude = _same_width_and(bits[i], sign_mask)
        largest = _same_width_max(largest, magnitude)
        smallest = _same_width_min(smallest, magnitude)
    return largest, smallest


@numba.njit(cache=True, nogil=True)
def _scan(bits, sign_mask, inf_bits, min_normal):
    """One branch-free pass over bit patterns (it vectorises), for blocks that hold zeros,
    subnormals, NaNs or Infs: the largest finite, the smallest and the smallest non-zero
    |x| as bit patterns (at or above ``inf_bits``: none), then the counts of finite values,
    zeros, NaNs, +Inf, -Inf and subnormals."""
    zero = bits.dtype.type(0)
    neg_inf = inf_bits | ~sign_mask
    largest, smallest, smallest_nonzero = zero, inf_bits, inf_bits
    finite = zeros = nans = pos_inf = neg_infs = subnormals = 0
    for i in range(len(bits)):
        magnitude = bits[i] & sign_mask
        is_finite = magnitude < inf_bits
        largest = max(largest, magnitude if is_finite else zero)
        smallest = min(smallest, magnitude)
        smallest_nonzero = min(smallest_nonzero, magnitude if magnitude != zero else inf_bits)
        finite += is_finite
        zeros += magnitude == zero
        nans += magnitude > inf_bits
        pos_inf += bits[i] == inf_bits
        neg_infs += bits[i] == neg_inf
        subnormals += (magnitude != zero) & (magnitude < min_normal)
    extremes = (largest, smallest, smallest_nonzero)
    return extremes, (finite, zeros, nans, pos_inf, neg_infs, subnormals)


@numba.njit(cache=True, nogil=True)
def _scan_parts(bits, sign_mask, inf_bits, min_normal, parts):
    """``_scan`` of a block, taken in its moments parts (``_MOMENTS_PART`` values), each
    part's finite values and subnormals put in ``parts``; the block's extremes and counts."""
    zero = bits.dtype.type(0)
    largest, smallest, smallest_nonzero = zero, inf_bits, inf_bits
    totals = np.zeros(6, np.int64)
    for part in range(len(parts)):
        lo = part * _MOMENTS_PART
        extremes, counts = _scan(bits[lo : lo + _MOMENTS_PART], sign_mask, inf_bits, min_normal)
        largest = max(largest, extremes[0])
        smallest = min(smallest, extremes[1])
        smallest_nonzero = min(smallest_nonzero, extremes[2])
        for k in range(6):
            totals[k] += counts[k]
        parts[part] = (counts[0], counts[5])
    counts = (totals[0], totals[1], totals[2], totals[3], totals[4], totals[5])
    return (largest, smallest, smallest_nonzero), counts


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
def _count_subnormals(bits, sign_mask, mant_bits, bias, hist, hist_lo):
    """Adds the subnormals to their exponent bins: only for blocks that hold some."""
    for i in range(len(bits)):
        magnitude = bits[i] & sign_mask
        if 0 < magnitude < (1 << mant_bits):
            hist[_bit_length(magnitude) - bias - mant_bits - hist_lo] += 1


@numba.njit(cache=True, nogil=True)
def _count_casts(bits, sign_mask, inf_bits, thresholds, zeros, non_finite, casts):
    """Adds, per format, the values that become 0 and those that become Inf/NaN (the
    ``zeros`` of the block too, for a format without a zero); ``non_finite`` counts the
    block's NaN and Inf."""
    for f in range(thresholds.shape[0]):
        t = thresholds[f]
        symmetric = t[0] == t[1] and t[2] == t[3] and t[4] == 0 and t[5] == 0
        if symmetric and t[0] >= 0 and t[2] <= inf_bits:
            at_most, at_least = _count_magnitudes(bits, sign_mask, t[0], t[2])
            under, over = at_most - zeros, at_least - non_finite
        else:
            under = over = 0
            for i in range(len(bits)):
                magnitude = bits[i] & sign_mask
                side = 1 if bits[i] < 0 else 0
                nonzero_finite = (magnitude != 0) & (magnitude < inf_bits)
                under += nonzero_finite & (magnitude <= t[side])
                over += nonzero_finite & ((magnitude >= t[2 + side]) | (magnitude < t[4 + side]))
        casts[f, 0] += under
        casts[f, 1] += over + (zeros if t[6] else 0)


@numba.njit(cache=True, nogil=True)
def _count_magnitudes(bits, sign_mask, at_most, at_least):
    """(values with |x| <= ``at_most``, values with |x| >= ``at_least``), compared as bit
    patterns: for a format whose thresholds are the same for both signs, the values that
    become 0 are those up to its threshold less the zeros, and those that become Inf/NaN
    are those from its threshold on less the NaN/Inf. Branch-free and counted in the
    patterns' own width (a block holds far fewer than 2**31 values): it vectorises to 8
    lanes for float32, 5x faster than with numba's widened integers."""
    at_most, at_least = bits.dtype.type(at_most), bits.dtype.type(at_least)
    low = high = bits.dtype.type(0)
    for i in range(len(bits)):
        magnitude = _same_width_and(bits[i], sign_mask)
        low = _same_width_add(low, _same_width_at_most(magnitude, at_most))
        high = _same_width_add(high, _same_width_at_most(at_least, magnitude))
    return np.int64(low), np.int64(high)


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _power_sums(values, inverse, shift, all_finite):
    """Sums of |s|, s**4, s**8, d and d**2 over the finite values, where s = x * inverse
    and d = s - shift (the sums of s and s**2 follow from those of d: ``_add_block_moments``).
    Reassociation lets the sums vectorise; five accumulators leave the compiler registers
    to interleave them (2x faster than seven); the NaN/Inf test stays exact (no finite-math
    assumption), and is skipped for a block known to be ``all_finite`` (the compiler takes
    the test out of the loop then: 7% faster)."""
    s_abs = s4 = s8 = d1 = d2 = 0.0
    for i in range(len(values)):
        x = np.float64(values[i])
        is_finite = all_finite | np.isfinite(x)
        s = x * inverse if is_finite else 0.0
        d = s - shift if is_finite else 0.0
        q = s * s
        s_abs += abs(s)
        s4 += q * q
        s8 += (q * q) * (q * q)
        d1 += d
        d2 += d * d
    return s_abs, s4, s8, d1, d2


@numba.njit(cache=True, nogil=True)
def _scaled_with_subnormals(values, bits, sign_mask, min_normal, inverse, unit):
    """The values scaled as in ``_power_sums``, for a block that holds subnormals: each
    subnormal is taken as its integer mantissa (a normal float) times ``unit``, so that a
    CPU that treats subnormal operands as 0 (XLA's threads, ``torch.set_flush_denormal``)
    still counts it. NaN and Inf stay as they are (``_power_sums`` leaves them out)."""
    scaled = np.empty(len(values))
    for i in range(len(values)):
        magnitude = bits[i] & sign_mask
        if magnitude < min_normal:
            s = np.float64(magnitude) * unit
            scaled[i] = -s if bits[i] < 0 else s
        else:
            scaled[i] = np.float64(values[i]) * inverse
    return scaled


@numba.njit(cache=True, nogil=True)
def _scale_exponent(largest, mant_bits, bias):
    """e with 2**e at or below the positive float whose bit pattern is ``largest``, clamped
    so that 2**-e stays a normal float64 (for subnormal maxima, and for float64 maxima from
    2**1023 on, whose scaled values then stay below 4): flush-to-zero mode would read a
    subnormal 2**-e as 0."""
    field = largest >> mant_bits
    exponent = field - bias
    if field == 0:
        exponent = _bit_length(largest) - bias - mant_bits
    return max(-1022, min(1022, exponent))


@numba.njit(cache=True, nogil=True)
def _first_finite(values):
    for i in range(len(values)):
        if np.isfinite(values[i]):
            return np.float64(values[i])
    return 0.0


@numba.njit(cache=True, nogil=True)
def _add_block_moments(
    values, bits, subnormals, sign_mask, largest, count, mant_bits, bias, running
):
    """Merges one block's moments into ``running`` = [scale exponent, finite count, sum s,
    sum |s|, sum s**2, sum s**4, sum s**8, mean s, M2 of s], s being x / 2**exponent.

    The block is scaled at its own maximum and shifted by its first finite value, whose
    deviation from the block's mean is bounded by the block's spread; the running sums
    move to the larger of the two scales (exact powers of two). A block with
    ``subnormals`` reads them through their bit patterns."""
    exponent = running[0]
    if largest > 0:
        block_exponent = _scale_exponent(largest, mant_bits, bias)
        if block_exponent > exponent:
            r = math.ldexp(1.0, int(exponent - block_exponent))
            running[2] *= r
            running[3] *= r
            running[4] *= r * r
            running[5] *= (r * r) * (r * r)
            running[6] *= ((r * r) * (r * r)) * ((r * r) * (r * r))
            running[7] *= r
            running[8] *= r * r
            exponent = running[0] = block_exponent
    else:
        block_exponent = exponent  # only zeros: nothing to scale
    inverse = math.ldexp(1.0, -int(block_exponent)) if block_exponent > _NO_SCALE else 1.0
    if subnormals:
        unit = math.ldexp(1.0, int(1 - bias - mant_bits - block_exponent))
        min_normal = bits.dtype.type(1 << mant_bits)
        scaled = _scaled_with_subnormals(values, bits, sign_mask, min_normal, inverse, unit)
        shift = _first_finite(scaled)
        sums = _power_sums(scaled, 1.0, shift, False)
    else:
        shift = _first_finite(values) * inverse
        sums = _power_sums(values, inverse, shift, count == len(values))
    s_abs, s4, s8, d1, d2 = sums
    # s = d + shift. Both are exact up to rounding of terms no larger than count * shift**2
    # <= count * sum(s**2) (the shift is one of the values): relative errors of 1e-12.
    s1 = d1 + count * shift
    s2 = d2 + shift * (2.0 * d1 + count * shift)
    f = math.ldexp(1.0, int(block_exponent - exponent))
    f2 = f * f
    f4 = f2 * f2
    running[2] += s1 * f
    running[3] += s_abs * f
    running[4] += s2 * f2
    running[5] += s4 * f4
    running[6] += s8 * (f4 * f4)
    block_mean = s1 / count * f
    block_m2 = max(d2 - d1 * d1 / count, 0.0) * f2
    n = running[1] + count
    delta = block_mean - running[7]
    running[7] += delta * count / n
    running[8] += block_m2 + delta * delta * running[1] * count / n
    running[1] = n


@numba.njit(cache=True, nogil=True)
def _rare_keys(keys):
    """Values counted so far under the keys of zeros/subnormals and of NaN/Inf (both
    signs)."""
    half = keys.shape[1] // 2
    rare = 0
    for row in range(4):
        rare += keys[row, 0] + keys[row, half - 1] + keys[row, half] + keys[row, 2 * half - 1]
    return rare


@numba.njit(cache=True, nogil=True)
def _new_sums(inf_bits, mant_bits, n_bins, n_formats, table, n, row_length, deferred):
    """The running sums of an array of ``n`` values along rows of ``row_length``
    (``_add_block`` adds to them, ``_finish`` reads them): key counts (int32, flushed into
    int64 totals), the counts vector, cast counts, the moments (``_add_block_moments``),
    the extremes' bit patterns, and the block formats' counts rows, sums, the sums'
    exponent and buffers (``_cpu_blocks``)."""
    n_fields = (inf_bits >> mant_bits) + 1
    keys = np.zeros((4, 2 * n_fields), np.int32)
    totals = np.zeros((4, 2 * n_fields), np.int64)
    counts = np.zeros(5 + n_bins + 2 * n_formats, np.int64)
    casts = np.zeros((n_formats, 2), np.int64)
    running = np.zeros(9)
    running[0] = _NO_SCALE
    extremes = np.array((0, inf_bits, inf_bits), dtype=np.int64)  # largest, smallest, nonzero
    scale_exponents = table[:, 7].max() if table.shape[0] else 0
    rows = np.zeros((table.shape[0], _block_scales.SCALES + scale_exponents), np.int64)
    block_sums = np.zeros(table.shape[0])
    units = np.array([_cpu_blocks.NO_UNITS])
    size = min(n, _BLOCK) if table.shape[0] else 0
    scratch = _cpu_blocks.new_scratch(size, row_length, scale_exponents, mant_bits == 52)
    # Per block of the array, what nvfp4 needs of it when it waits for the second sweep:
    # its largest finite |x|, subnormals, values read as 0, finite or not, and where its
    # blocks' maxima end in ``maxima`` (float32 only; a block of 16 a 16 values, and at
    # most one short block more a row or part of a row).
    deferred_blocks = np.empty((2 * (n // _BLOCK) + 2 if deferred else 0, 5), np.int64)
    n_maxima = n // NVFP4_BLOCK + n // row_length + 3 if deferred and mant_bits == 23 else 0
    maxima = np.empty(n_maxima, np.int32)
    blocks = (rows, block_sums, units, scratch, deferred_blocks, maxima)
    return keys, totals, counts, casts, running, extremes, blocks


@numba.njit(cache=True, nogil=True)
def _add_block(
    values, bits, keys_bits, block, sign_mask, inf_bits, mant_bits, bias, hist_lo, n_bins,
    thresholds, scaling, sums,
):  # fmt: skip
    """Adds block number ``block`` of an array (at most ``_BLOCK`` values, given as floats
    and as signed and unsigned integers of one width) to the running ``sums``; ``scaling``
    describes the block formats and where the block lies (``_scaling``)."""
    keys, totals, counts, casts, running, extremes, blocks = sums
    if block % _FLUSH_BLOCKS == _FLUSH_BLOCKS - 1:
        totals += keys
        keys[:] = 0
    rare_before = _rare_keys(keys)
    _count_keys(keys_bits, keys)
    if _rare_keys(keys) == rare_before:  # only normal values: the common case
        block_largest, block_smallest = _extremes(bits, sign_mask)
        block_extremes = (block_largest, block_smallest, block_smallest)
        block_counts = (len(bits), 0, 0, 0, 0, 0)
        parts = np.empty((0, 2), np.int64)  # every moments part all finite and normal
    else:
        min_normal = bits.dtype.type(1 << mant_bits)
        parts = np.empty(((len(bits) + _MOMENTS_PART - 1) // _MOMENTS_PART, 2), np.int64)
        block_extremes, block_counts = _scan_parts(bits, sign_mask, inf_bits, min_normal, parts)
    extremes[0] = max(extremes[0], np.int64(block_extremes[0]))
    extremes[1] = min(extremes[1], np.int64(block_extremes[1]))
    extremes[2] = min(extremes[2], np.int64(block_extremes[2]))
    finite, zeros, nans, pos_inf, neg_inf, subnormals = block_counts
    counts[1] += zeros
    counts[2] += nans
    counts[3] += pos_inf
    counts[4] += neg_inf
    if subnormals:
        _count_subnormals(bits, sign_mask, mant_bits, bias, counts[5 : 5 + n_bins], hist_lo)
    if thresholds.shape[0]:
        _count_casts(bits, sign_mask, inf_bits, thresholds, zeros, nans + pos_inf + neg_inf, casts)
    table, offset, row_length, tensor_scale, which = scaling
    if table.shape[0]:
        rows, block_sums, units, scratch, deferred, maxima = blocks
        non_finite = nans + pos_inf + neg_inf
        largest = np.int64(block_extremes[0])
        at = deferred[block - 1, 4] if block > 0 and len(deferred) else 0
        kept = _cpu_blocks.add_chunk(
            values, bits, largest, sign_mask, inf_bits, subnormals, zeros + non_finite,
            non_finite == 0, offset, row_length, table, tensor_scale, which, rows, block_sums,
            units, scratch, maxima[at:],
        )  # fmt: skip
        if which == _cpu_blocks.BUT_NVFP4:
            deferred[block] = (
                largest, subnormals, zeros + non_finite, np.int64(non_finite == 0), at + kept
            )  # fmt: skip
    if not finite:
        return
    for part, lo in enumerate(range(0, len(values), _MOMENTS_PART)):
        hi = min(lo + _MOMENTS_PART, len(values))
        if len(parts):  # NaN, Inf or subnormals in the block: the part's own counts
            part_finite, part_subnormals = parts[part, 0], parts[part, 1]
        else:
            part_finite, part_subnormals = hi - lo, 0
        if part_finite:
            _add_block_moments(
                values[lo:hi], bits[lo:hi], part_subnormals, sign_mask, block_extremes[0],
                part_finite, mant_bits, bias, running,
            )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def _finish(n, inf_bits, mant_bits, bias, hist_lo, n_bins, table, sums):
    """The counts and moments vectors (``tensor_stats.engine_layout``) of ``n`` values
    summed."""
    keys, totals, counts, casts, running, extremes, blocks = sums
    n_fields = (inf_bits >> mant_bits) + 1
    hist = counts[5 : 5 + n_bins]
    counts[0] = n
    totals += keys
    for field in range(1, n_fields - 1):  # normal binades: exponent = field - bias
        for row in range(4):
            hist[field - bias - hist_lo] += totals[row, field] + totals[row, n_fields + field]
    counts[5 + n_bins :] = casts.reshape(-1)
    moments = np.empty(10 + 3 * table.shape[0])
    moments[0] = math.ldexp(1.0, int(running[0])) if running[0] > _NO_SCALE else 1.0
    moments[1:6] = running[2:7]
    moments[6] = running[8]
    moments[7:10] = extreme_values(extremes, mant_bits)
    if not table.shape[0]:
        return counts, moments
    # After the element formats' casts: each block format's (underflow, overflow), then
    # each one's zero and clamped blocks and blocks per scale exponent.
    rows, block_sums, units = blocks[0], blocks[1], blocks[2]
    exponent = units[0] if units[0] != _cpu_blocks.NO_UNITS else 0
    n_blocks = table.shape[0]
    widths = _block_scales.SCALES - _block_scales.ZERO_BLOCKS + table[:, 7]
    out = np.empty(len(counts) + 2 * n_blocks + widths.sum(), np.int64)
    out[: len(counts)] = counts
    at = len(counts)
    for f in range(n_blocks):
        out[at + 2 * f] = rows[f, _block_scales.UNDER]
        out[at + 2 * f + 1] = rows[f, _block_scales.OVER]
    at += 2 * n_blocks
    for f in range(n_blocks):
        out[at : at + widths[f]] = rows[
            f, _block_scales.ZERO_BLOCKS : _block_scales.SCALES + table[f, 7]
        ]
        at += widths[f]
        moments[10 + 3 * f] = exponent
        # The signal, the sum of the finite values' squares, is the moments' (``running``).
        signal = running[4] * math.ldexp(1.0, 2 * int(running[0] - exponent))
        moments[11 + 3 * f] = signal if running[0] > _NO_SCALE else 0.0
        moments[12 + 3 * f] = block_sums[f]
    return out, moments


@numba.njit(cache=True, nogil=True)
def _chunk_end(lo, n, offset, row_length, aligned):
    """Where the block of the array starting at ``lo`` (``offset`` values into its row)
    ends: ``_BLOCK`` values on; with block-scaled formats over rows not ``aligned`` to
    ``_SCALE_BLOCK``, at the end of its row or of as many whole rows as fit."""
    if aligned:
        return min(lo + _BLOCK, n)
    if offset != 0 or row_length > _BLOCK:
        return min(lo + min(_BLOCK, row_length - offset), n)
    return min(lo + max(1, _BLOCK // row_length) * row_length, n)


@numba.njit(cache=True, nogil=True)
def _chunk_starts(n, offset, row_length, aligned):
    """Where the array's blocks (``_chunk_end``) start, and ``n``: the second sweep takes
    them from the last, whose values the first sweep left in the L2 cache."""
    starts = [0]
    while starts[-1] < n:
        lo = starts[-1]
        starts.append(_chunk_end(lo, n, (offset + lo) % row_length, row_length, aligned))
    return starts


@numba.njit(cache=True, nogil=True)
def _largest_finite(bits, sign_mask, inf_bits):
    """The bit pattern of the largest finite |x| (0 when none), in the patterns' width."""
    largest = _same_width_and(sign_mask, 0)
    for i in range(len(bits)):
        magnitude = _same_width_and(bits[i], sign_mask)
        largest = _same_width_max(largest, _same_width_below(magnitude, inf_bits))
    return np.int64(largest)


@numba.njit(cache=True, nogil=True)
def _scaling(table, offset, row_length, amax):
    """What ``_add_block`` needs for the block formats of ``table``: the table, the offset
    of the array's first value in its row, the row length, nvfp4's per-tensor scale from
    the tensor's largest finite |x| ``amax``, and which formats to take: all, or where
    ``amax`` is not known yet (negative) and nvfp4 needs it, all but nvfp4 (which then
    waits for ``_deferred_block``)."""
    if amax >= 0:
        return table, offset, row_length, _block_scales.tensor_scale(amax), _cpu_blocks.ALL
    which = _cpu_blocks.BUT_NVFP4 if needs_amax(table) else _cpu_blocks.ALL
    return table, offset, row_length, 0.0, which


@numba.njit(cache=True, nogil=True)
def _deferred_block(values, bits, block, sign_mask, inf_bits, scaling, sums):
    """nvfp4 over block number ``block`` of an array, in the second sweep, with what the
    first found of it; ``scaling`` as ``_scaling`` gives it, the per-tensor scale known."""
    table, offset, row_length, tensor_scale, _ = scaling
    rows, block_sums, units, scratch, deferred, maxima = sums[6]
    largest, subnormals, read_as_zero, finite, end = deferred[block]
    at = deferred[block - 1, 4] if block > 0 else 0
    _cpu_blocks.add_chunk(
        values, bits, largest, sign_mask, inf_bits, subnormals, read_as_zero, finite == 1,
        offset, row_length, table, tensor_scale, _cpu_blocks.ONLY_NVFP4, rows, block_sums,
        units, scratch, maxima[at:end],
    )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def needs_amax(table):
    """Whether the block formats of ``table`` need the tensor's largest finite magnitude
    before its values (nvfp4's per-tensor scale does). A loop: numba has no ``any`` of a
    generator."""
    for f in range(table.shape[0]):  # noqa: SIM110
        if table[f, 0] == NVFP4:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _summarise(
    values, bits, keys_bits, sign_mask, inf_bits, mant_bits, bias, hist_lo, n_bins, thresholds,
    table, offset, row_length, amax,
):  # fmt: skip
    """The counts and moments vectors (``tensor_stats.engine_layout``) of one array, given
    as floats and as signed and unsigned integers of the same width. For block formats
    (``table``), its first value lies ``offset`` values into a row of ``row_length``, and
    ``amax`` is the whole tensor's largest finite |x| (negative: this array's, found here)."""
    first = scaling = _scaling(table, offset, row_length, amax)
    aligned = table.shape[0] == 0 or row_length % _SCALE_BLOCK == 0
    deferred = scaling[4] == _cpu_blocks.BUT_NVFP4
    sums = _new_sums(
        inf_bits, mant_bits, n_bins, thresholds.shape[0], table, len(bits), row_length, deferred
    )
    lo = block = 0
    while lo < len(bits):
        hi = _chunk_end(lo, len(bits), offset, row_length, aligned)
        _add_block(
            values[lo:hi], bits[lo:hi], keys_bits[lo:hi], block, sign_mask, inf_bits,
            mant_bits, bias, hist_lo, n_bins, thresholds, scaling, sums,
        )  # fmt: skip
        offset = (offset + hi - lo) % row_length
        scaling = (table, offset, row_length, scaling[3], scaling[4])
        lo, block = hi, block + 1
    if deferred:  # nvfp4, once the tensor's largest magnitude is known: a second sweep
        scaling = _nvfp4_sweep(first, sums, mant_bits)
        starts = _chunk_starts(len(bits), first[1], row_length, aligned)
        for block in range(len(starts) - 2, -1, -1):
            lo, hi = starts[block], starts[block + 1]
            scaling = (table, (first[1] + lo) % row_length, row_length, scaling[3], scaling[4])
            _deferred_block(values[lo:hi], bits[lo:hi], block, sign_mask, inf_bits, scaling, sums)
    return _finish(len(bits), inf_bits, mant_bits, bias, hist_lo, n_bins, table, sums)


@numba.njit(cache=True, nogil=True)
def _nvfp4_sweep(first, sums, mant_bits):
    """The ``scaling`` of the second sweep, from the first's (its start) and the array's
    largest finite |x| that the first found."""
    amax = extreme_values(sums[5][:1], mant_bits)[0]
    table, offset, row_length, _, _ = first
    tensor_scale = _block_scales.tensor_scale(amax)
    return table, offset, row_length, tensor_scale, _cpu_blocks.ONLY_NVFP4


@numba.njit(cache=True, nogil=True)
def _summarise_float32(values, hist_lo, n_bins, thresholds, table, offset, row_length, amax):
    """``_summarise`` of a float32 array."""
    return _summarise(
        values,
        values.view(np.int32),
        values.view(np.uint32),
        _FLOAT32_SIGN_MASK,
        _FLOAT32_INF,
        23,
        127,
        hist_lo,
        n_bins,
        thresholds,
        table,
        offset,
        row_length,
        amax,
    )


@numba.njit(cache=True, nogil=True)
def _summarise_float64(values, hist_lo, n_bins, thresholds, table, offset, row_length, amax):
    """``_summarise`` of a float64 array."""
    return _summarise(
        values,
        values.view(np.int64),
        values.view(np.uint64),
        np.int64(0x7FFFFFFFFFFFFFFF),
        np.int64(0x7FF0000000000000),
        52,
        1023,
        hist_lo,
        n_bins,
        thresholds,
        table,
        offset,
        row_length,
        amax,
    )


@numba.njit(cache=True, nogil=True)
def _summarise_bfloat16(patterns, hist_lo, n_bins, thresholds, table, offset, row_length, amax):
    """``_summarise`` of a bfloat16 array given as its uint16 bit patterns: each block is
    widened into a float32 buffer that stays in the cache (a bfloat16 is the top half of
    the float32 of the same value), so no float32 copy of the array is made. nvfp4's
    second sweep reads the patterns in place (``_cpu_blocks.add_chunk``)."""
    first = scaling = _scaling(table, offset, row_length, amax)
    aligned = table.shape[0] == 0 or row_length % _SCALE_BLOCK == 0
    deferred = scaling[4] == _cpu_blocks.BUT_NVFP4
    n = len(patterns)
    sums = _new_sums(_FLOAT32_INF, 23, n_bins, thresholds.shape[0], table, n, row_length, deferred)
    values = np.empty(min(n, _BLOCK), np.float32)
    bits = values.view(np.int32)
    keys_bits = values.view(np.uint32)
    lo = block = 0
    while lo < n:
        hi = _chunk_end(lo, n, offset, row_length, aligned)
        m = _widen(patterns, lo, hi, keys_bits)
        _add_block(
            values[:m], bits[:m], keys_bits[:m], block, _FLOAT32_SIGN_MASK, _FLOAT32_INF,
            23, 127, hist_lo, n_bins, thresholds, scaling, sums,
        )  # fmt: skip
        offset = (offset + m) % row_length
        scaling = (table, offset, row_length, scaling[3], scaling[4])
        lo, block = hi, block + 1
    if deferred:  # nvfp4, once the tensor's largest magnitude is known: a second sweep
        scaling = _nvfp4_sweep(first, sums, 23)
        starts = _chunk_starts(n, first[1], row_length, aligned)
        for block in range(len(starts) - 2, -1, -1):
            lo, hi = starts[block], starts[block + 1]
            scaling = (table, (first[1] + lo) % row_length, row_length, scaling[3], scaling[4])
            _deferred_block(
                patterns[lo:hi], bits[: hi - lo], block, _FLOAT32_SIGN_MASK, _FLOAT32_INF,
                scaling, sums,
            )  # fmt: skip
    return _finish(n, _FLOAT32_INF, 23, 127, hist_lo, n_bins, table, sums)


@numba.njit(cache=True, nogil=True)
def _widen(patterns, lo, hi, keys_bits):
    """bfloat16 patterns ``patterns[lo:hi]`` into the float32 patterns ``keys_bits``; how
    many."""
    chunk = patterns[lo:hi]  # indices from 0: no wrap-around test, so the loop vectorises
    for i in range(len(chunk)):
        keys_bits[i] = np.uint32(chunk[i]) << 16
    return len(chunk)


@functools.cache
def _layout(dtype: str, formats: tuple[str, ...]) -> tuple[int, int, np.ndarray, np.ndarray]:
    """The kernel's arguments after the array: the histogram's lowest exponent and bins,
    the element formats' thresholds and the block formats' table (``kernel_tables``)."""
    dtype_info = info(dtype)
    thresholds = threshold_bits(dtype, formats, dtype == "float64")
    return dtype_info.min_exponent, dtype_info.n_bins, thresholds, block_table(dtype, formats)


def compute_cpu(
    values: np.ndarray,
    dtype: str,
    formats: tuple[str, ...],
    threads: int | None = None,
    row_length: int = 1,
) -> TensorStats:
    """Statistics of a host array of ``dtype`` whose values are given as float64, as the
    uint16 bit patterns of bfloat16 (read in place) or as float32 (any other dtype
    narrower than float64, widened exactly); block formats take its blocks along rows of
    ``row_length`` values (the tensor's last dimension).

    An array of at least two parts of ``_MIN_PART`` values is split between this thread and
    up to ``threads - 1`` plain threads (default: one per core; the kernel drops the GIL) and
    the parts merged exactly; parts begin on blocks' boundaries. The torch tracker passes
    ``threads=1`` (``Recorder`` says why).
    """
    if not values.flags.c_contiguous:
        values = np.ascontiguousarray(values)
    values = values.reshape(-1)
    summarise = _KERNELS[values.dtype.type]
    layout = _layout(dtype, formats)
    row_length = max(int(row_length), 1)
    parts = min(threads or _CORES, len(values) // _MIN_PART)
    if parts <= 1:  # nvfp4's per-tensor scale found by the kernel (``_scaling``)
        return TensorStats.unpack(dtype, formats, *summarise(values, *layout, 0, row_length, -1.0))
    amax = _tensor_amax(values) if needs_amax(layout[3]) else -1.0
    bounds = np.linspace(0, len(values), parts + 1).astype(np.int64)
    if layout[3].shape[0]:  # on a block boundary: a row's start plus a multiple of a block
        bounds = (
            bounds // row_length * row_length + bounds % row_length // _SCALE_BLOCK * _SCALE_BLOCK
        )
    ranges = [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]

    def run(lo, hi):
        return summarise(values[lo:hi], *layout, int(lo % row_length), row_length, amax)

    jobs = [_pool().submit(run, lo, hi) for lo, hi in ranges[1:]]
    results = [run(*ranges[0])]  # in this thread
    results += [job.result() for job in jobs]
    stats = (TensorStats.unpack(dtype, formats, *result) for result in results)
    return functools.reduce(TensorStats.merge, stats)


def _tensor_amax(values: np.ndarray) -> float:
    """The largest finite |x| of a kernel's input array (bfloat16 as uint16 patterns)."""
    if values.dtype == np.uint16:
        top = _largest_finite(values.view(np.int16), np.int16(0x7FFF), np.int16(0x7F80))
        return float(extreme_values(np.array([top << 16]), 23)[0])
    if values.dtype == np.float64:
        top = _largest_finite(values.view(np.int64), *_FLOAT64_MASKS)
        return float(extreme_values(np.array([top]), 52)[0])
    top = _largest_finite(values.view(np.int32), _FLOAT32_SIGN_MASK, _FLOAT32_INF)
    return float(extreme_values(np.array([top]), 23)[0])


_KERNELS = {
    np.float32: _summarise_float32,
    np.float64: _summarise_float64,
    np.uint16: _summarise_bfloat16,
}


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(
        max_workers=max(1, _CORES - 1), thread_name_prefix="tandv-stats"
    )


@numba.njit(cache=True, nogil=True)
def extreme_values(patterns, mant_bits):
    """The kernel's extremes, bit patterns of float32 or float64 (``mant_bits`` 23 or 52),
    as float64 values; a pattern at or above Inf's means "none" and gives Inf. Exact with
    subnormal operands read as 0 (flush-to-zero mode): a float32 pattern is converted
    through its integer mantissa, a float64 one only reinterpreted."""
    values = np.empty(len(patterns))
    for k in range(len(patterns)):
        pattern = np.int64(patterns[k])
        field = pattern >> mant_bits
        mantissa = pattern & ((np.int64(1) << mant_bits) - 1)
        if field >= (2047 if mant_bits == 52 else 255):
            values[k] = np.inf
        elif mant_bits == 52:
            values[k] = np.array([pattern]).view(np.float64)[0]
        elif field == 0:
            values[k] = math.ldexp(np.float64(mantissa), -149)
        else:
            values[k] = math.ldexp(np.float64(mantissa | (1 << 23)), int(field) - 150)
    return values
