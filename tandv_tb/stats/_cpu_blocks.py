"""The CPU kernel's block-scaled formats (``tandv_tb.block_formats``): compiled (numba) loops
over one cached chunk of values, called by ``_cpu_kernel`` while the chunk is in the cache.

Chunks begin and end on block boundaries (``_cpu_kernel`` sees to it). For each format the
blocks' largest finite magnitudes give their scales (counted: zero, clamped, per exponent),
then each value divided by its block's scale is rounded to the element format as
``rint(v / q) * q``, ``q`` the element's quantum at ``v``'s exponent (exact: powers of two),
which is round to nearest, ties to even. Three paths, all exact:

- float32 chunks (every dtype but float64) without subnormals, whose scales keep the
  element's quanta in float32's normal range: in float32, 8 lanes, bit operations kept in
  32 bits (``_bit_ops``); over whole consecutive blocks (rows of a multiple of 32 values:
  ``_add_aligned``) or any rows (``add_chunk_float32``);
- other float32 chunks: in integers on the bit patterns (``_quantize_bits``,
  ``_quantize_float32_bits``), so that a CPU in flush-to-zero mode (XLA's threads) counts
  subnormals all the same;
- float64 arrays: in float64 from their exact magnitudes (``magnitudes``, ``add_chunk``).

nvfp4's scales follow torchao's float32 arithmetic, each operation done in float64 and
rounded to float32 by ``_float32`` (float64 holds more than twice float32's precision, so
no result is rounded twice wrongly); its elements are the float32 products of the values
and the block's reciprocal, as torchao's.

A format's counts are a flat int64 row: underflow, overflow, zero blocks, blocks clamped
low, clamped high, then blocks per scale exponent; its sum: the squares of the errors, in
units of ``4**exponent`` (``exponent`` the same for all formats). The signal, the squares of
the values, is the moments' sum that ``_cpu_kernel`` keeps anyway.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from tandv_tb.block_formats import MX_SCALE_MAX, MX_SCALE_MIN, NVFP4, RCEIL
from tandv_tb.stats._bit_ops import (
    _same_width_add,
    _same_width_and,
    _same_width_below,
    _same_width_max,
    _same_width_sub,
)
from tandv_tb.stats._bit_ops import bits32 as _bits32
from tandv_tb.stats._bit_ops import bits64 as _bits
from tandv_tb.stats._bit_ops import float32_of as _from_bits32
from tandv_tb.stats._bit_ops import float64_of as _from_bits

#: Fields of a format's counts row before its scale exponents.
UNDER, OVER, ZERO_BLOCKS, CLAMPED_LOW, CLAMPED_HIGH, SCALES = range(6)
_MANTISSA = (1 << 52) - 1


@numba.njit(cache=True, nogil=True, inline="always")
def _power_of_two(exponent):
    """2**exponent for a float64 normal exponent."""
    return _from_bits((exponent + 1023) << 52)


@numba.njit(cache=True, nogil=True, inline="always")
def _exponent(value):
    """floor(log2(value)) of a positive normal float64 (-1023 for 0 and subnormals)."""
    return (_bits(value) >> 52) - 1023


@numba.njit(cache=True, nogil=True)
def magnitudes(values, bits, sign_mask, inf_bits, mant_bits, out):
    """``out[i]`` = |values[i]| as float64, 0 for NaN/Inf. A float32 subnormal is read as
    its integer mantissa times 2**-149; a float64 subnormal (which no block format can hold,
    and whose square is 0 in float64) as 2**-1022."""
    if mant_bits == 52:
        for i in range(len(values)):
            magnitude = bits[i] & sign_mask
            normal = abs(np.float64(values[i])) if magnitude >= (1 << 52) else 2.0**-1022
            out[i] = normal if (magnitude < inf_bits) & (magnitude != 0) else 0.0
    else:
        for i in range(len(values)):
            magnitude = bits[i] & sign_mask
            tiny = np.float64(magnitude) * 2.0**-149
            normal = abs(np.float64(values[i]))
            out[i] = (normal if magnitude >= (1 << 23) else tiny) if magnitude < inf_bits else 0.0


_FLOAT32_MAX = float(np.finfo(np.float32).max)


@numba.njit(cache=True, nogil=True, inline="always")
def _float32(value):
    """``value >= 0`` rounded to float32 (to nearest, ties to even), saturating at its
    largest value, as a float64; below float32's normal range by ``rint``, so flush-to-zero
    mode cannot flush it."""
    normal = np.float64(np.float32(min(value, _FLOAT32_MAX)))
    tiny = np.rint(value * 2.0**149) * 2.0**-149
    return normal if value >= 2.0**-126 else tiny


@numba.njit(cache=True, nogil=True, inline="always")
def _round_element(v, emin, mant_bits):
    """v >= 0 rounded to nearest, ties to even, at the element format's precision, with no
    upper limit on the exponent."""
    quantum = max(_exponent(v), emin) - mant_bits
    return np.rint(v * _power_of_two(-quantum)) * _power_of_two(quantum)


@numba.njit(cache=True, nogil=True)
def _quantize(a, scales, unit, emin, mant_bits, largest, errors):
    """(underflow, overflow) of the magnitudes ``a``, each divided by its block's scale
    ``scales[i]`` (a power of two) and rounded to the element format; ``squares[i]`` is
    its error times ``unit``. Branch-free with no float sum, so it vectorises."""
    under = over = 0
    for i in range(len(a)):
        inverse = _from_bits((2046 << 52) - _bits(scales[i]))  # 1 / scales[i], exactly
        q = _round_element(a[i] * inverse, emin, mant_bits)
        over += q > largest
        q = min(q, largest)
        under += (q == 0.0) & (a[i] != 0.0)
        errors[i] = (a[i] - q * scales[i]) * unit
    return under, over


@numba.njit(cache=True, nogil=True)
def _quantize_float32(a, reciprocals, dequanta, wide, unit, errors):
    """nvfp4's (underflow, overflow): each magnitude rounded to float32 (``wide``: a
    float64 input), times its block's ``reciprocals[i]`` in float32, rounded to E2M1
    (a product below float32's normal range rounds to 0 in E2M1 whether flushed or not);
    ``errors[i]`` as in ``_quantize``, the dequantized value being ``q * dequanta[i]``."""
    under = over = 0
    for i in range(len(a)):
        x = _float32(a[i]) if wide else a[i]
        v = np.float64(np.float32(x * reciprocals[i])) if x != 0.0 else 0.0
        q = _round_element(v, 0, 1)
        over += q > 6.0
        q = min(q, 6.0)
        under += (q == 0.0) & (a[i] != 0.0)
        errors[i] = (a[i] - q * dequanta[i]) * unit
    return under, over


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _sum(values, unit):
    """The sum of (values[i] * unit)**2, in any order (so that it vectorises)."""
    total = 0.0
    for i in range(len(values)):
        s = values[i] * unit
        total += s * s
    return total


@numba.njit(cache=True, nogil=True)
def _largest(a, lo, hi):
    """max(a[lo:hi]) of magnitudes, compared as bit patterns (so that it vectorises)."""
    largest = 0
    for i in range(lo, hi):
        largest = max(largest, _bits(a[i]))
    return _from_bits(largest)


@numba.njit(cache=True, nogil=True, inline="always")
def _mx_scale(amax, rule, emax, mant_bits, max_mantissa, scale_lo, row):
    """One MX block's scale 2**X (counted in ``row``) from its largest magnitude."""
    if amax == 0.0:
        row[ZERO_BLOCKS] += 1
        return _power_of_two(MX_SCALE_MIN)
    scale = _exponent(amax) - emax
    if rule == RCEIL:  # up one where amax's significand exceeds the element's largest one
        significand = ((1 << 52) | (_bits(amax) & _MANTISSA)) << mant_bits
        scale += significand > (max_mantissa << 52)
    if scale < MX_SCALE_MIN:
        row[CLAMPED_LOW] += 1
        scale = MX_SCALE_MIN
    elif scale > MX_SCALE_MAX:
        row[CLAMPED_HIGH] += 1
        scale = MX_SCALE_MAX
    row[SCALES + scale - scale_lo] += 1
    return _power_of_two(scale)


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _nvfp4_scale(amax, tensor_scale, scale_lo, row):
    """One nvfp4 block's E4M3 scale (counted in ``row``) from its largest magnitude, by
    torchao's ``nvfp4_quantize`` with ``per_tensor_scale``."""
    amax = _float32(amax)
    smallest = 2.0**-6
    if amax == 0.0:
        row[ZERO_BLOCKS] += 1
        return smallest
    raw = _float32(_float32(amax / 6.0) / tensor_scale)
    row[CLAMPED_LOW] += raw < smallest
    row[CLAMPED_HIGH] += raw > 448.0
    clamped = min(max(raw, smallest), 448.0) if raw == raw else smallest  # NaN: none
    step = _power_of_two(_exponent(clamped) - 3)  # E4M3: 3 mantissa bits, normal here
    block_scale = np.rint(clamped / step) * step
    row[SCALES + _exponent(block_scale) - scale_lo] += 1
    return block_scale


@numba.njit(cache=True, nogil=True, error_model="numpy")
def add_chunk(a, offset, row_length, table, tensor_scale, wide, exponent, rows, sums, scratch):
    """Adds the block formats' counts (``rows[f]``) and sums of squared errors (``sums[f]``)
    of the magnitudes ``a`` of one chunk, whose first value lies ``offset`` values into its
    row of ``row_length``; ``table`` describes the formats (``BlockFormat.kernel_row``);
    ``scratch`` holds three float64 arrays at least as long as ``a``."""
    n = len(a)
    unit = math.ldexp(1.0, -exponent)
    first, second, errors = scratch[0][:n], scratch[1][:n], scratch[2][:n]
    reciprocal_tensor_scale = _float32(1.0 / tensor_scale)
    for f in range(table.shape[0]):
        rule, size, emax, emin, mant_bits, max_mantissa, scale_lo, _ = table[f]
        row = rows[f]
        lo, position = 0, offset
        while lo < n:  # each block's scale (and nvfp4's reciprocal) for its values
            hi = min(lo + size, lo + row_length - position, n)
            amax = _largest(a, lo, hi)
            if rule == NVFP4:
                block_scale = _nvfp4_scale(amax, tensor_scale, scale_lo, row)
                first[lo:hi] = _float32(reciprocal_tensor_scale / block_scale)
                second[lo:hi] = block_scale * tensor_scale
            else:
                first[lo:hi] = _mx_scale(amax, rule, emax, mant_bits, max_mantissa, scale_lo, row)
            position = (position + hi - lo) % row_length
            lo = hi
        if rule == NVFP4:
            under, over = _quantize_float32(a, first, second, wide, unit, errors)
        else:
            largest = math.ldexp(np.float64(max_mantissa), emax - mant_bits)
            under, over = _quantize(a, first, unit, emin, mant_bits, largest, errors)
        row[UNDER] += under
        row[OVER] += over
        sums[f] += _sum(errors, 1.0)


@numba.njit(cache=True, nogil=True, inline="always")
def _round_bits(magnitude, scale, emin, emax, mant_bits, max_mantissa):
    """A float32 magnitude given by its bit pattern, divided by 2**scale and rounded to the
    element format (to nearest, ties to even, saturating), all in integers: (the element
    value's integer mantissa ``q``, the bits ``shift`` rounded off the value's integer
    mantissa ``m`` (value ``m * 2**low``), ``m``, ``low``, whether it overflowed). The
    element value is ``q * 2**(low + shift)``; shift >= 6 for every MX element and scale."""
    field = magnitude >> 23
    normal = field != 0
    m = (magnitude & 0x7FFFFF) | 0x800000 if normal else magnitude
    low = field - 150 if normal else -149
    exponent = field - 127 if normal else _exponent(np.float64(magnitude)) - 149
    e = exponent - scale  # of the value in element units
    shift = min(max(e, emin) - mant_bits + scale - low, 26)
    rounded = (m + (1 << (shift - 1)) - 1 + ((m >> shift) & 1)) >> shift
    over = (e == emax) & (rounded > max_mantissa)
    return (max_mantissa if over else rounded), shift, m, low, over


@numba.njit(cache=True, nogil=True)
def _quantize_bits(bits, scales, exponent, emin, emax, mant_bits, max_mantissa, errors):
    """``_quantize`` on float32 bit patterns (NaN/Inf read as 0), each divided by 2**
    ``scales[i]``, in integers (8 lanes of int32 would be the patterns' own width; numba
    widens them to int64, 4 lanes): no float64 copy of the values is made. ``errors[i]``
    (float32, exact) is the error times 2**-exponent, 0 where that is below float32's
    normal range (less than 2**-126 of the largest value: far below any sum's rounding)."""
    under = over = 0
    for i in range(len(bits)):
        magnitude = bits[i] & 0x7FFFFFFF
        magnitude = magnitude if magnitude < 0x7F800000 else 0
        q, shift, m, low, saturated = _round_bits(
            magnitude, scales[i], emin, emax, mant_bits, max_mantissa
        )
        under += (q == 0) & (magnitude != 0)
        over += saturated
        field = low - exponent + 127
        unit = _from_bits32(field << 23) if field > 0 else np.float32(0.0)
        errors[i] = np.float32(m - (q << shift)) * unit
    return under, over


@numba.njit(cache=True, nogil=True)
def _quantize_float32_bits(values, bits, reciprocals, dequanta, exponent, errors):
    """``_quantize_float32`` on float32 values: each |x| times its block's reciprocal in
    float32, then rounded to E2M1 in integers; ``errors[i]`` (float64) as there."""
    under = over = 0
    unit = math.ldexp(1.0, -exponent)
    for i in range(len(bits)):
        magnitude = bits[i] & 0x7FFFFFFF
        magnitude = magnitude if magnitude < 0x7F800000 else 0
        x = _from_bits32(magnitude)
        v = x * reciprocals[i] if magnitude != 0 else np.float32(0.0)
        q, shift, _, low, saturated = _round_bits(_bits32(v), 0, 0, 2, 1, 3)
        under += (q == 0) & (magnitude != 0)
        over += saturated
        element = math.ldexp(np.float64(q), low + shift) if q != 0 else 0.0
        errors[i] = (np.float64(x) - element * dequanta[i]) * unit
    return under, over


@numba.njit(cache=True, nogil=True, inline="always")
def _pattern_value(pattern):
    """The float64 of a non-negative float32 bit pattern, a subnormal through its integer
    mantissa (flush-to-zero mode would read it as 0)."""
    if pattern < 0x800000:
        return np.float64(pattern) * 2.0**-149
    return np.float64(_from_bits32(pattern))


@numba.njit(cache=True, nogil=True, inline="always")
def _largest_pattern(values, lo, hi):
    """The bit pattern of the largest finite |x| of ``values[lo:hi]`` (float32): branch-free
    in the patterns' own width, so that it vectorises."""
    largest = np.int32(0)
    for i in range(lo, hi):
        largest = _same_width_max(largest, _bits32(_finite_magnitude(values[i])))
    return largest


@numba.njit(cache=True, nogil=True, inline="always")
def _finite_magnitude(x):
    """|x| of a float32, 0 for NaN and Inf."""
    a = abs(x)
    return a if a <= _FLOAT32_LARGEST else np.float32(0.0)


_FLOAT32_LARGEST = np.float32(np.finfo(np.float32).max)
#: Rows of a multiple of this many values hold whole blocks, consecutive in every chunk.
_ALIGNED = 32
#: The scale exponent kept for a block with no finite non-zero value (nothing to count).
_NO_BLOCK = -(1 << 20)
#: The bit pattern of 2**127 (the exponent field of 254): 2**-k has (254 << 23) less 2**k's.
_RECIPROCAL_PATTERN = np.int32(254 << 23)


@numba.njit(cache=True, nogil=True, inline="always")
def _rounded32(v, quantum_low, mant_bits):
    """v >= 0 (float32, no subnormal) rounded to nearest, ties to even, to a multiple of
    the element's quantum at v, ``max(2**floor(log2 v) * 2**-mant_bits, quantum_low)``, all
    powers of two in float32's normal range: exact float32 arithmetic."""
    top = _from_bits32(_same_width_and(_bits32(v), np.int32(0x7F800000)))  # 2**floor(log2 v)
    quantum = max(top * _from_bits32(np.int32((127 - mant_bits) << 23)), quantum_low)
    inverse = _from_bits32(_same_width_sub(_RECIPROCAL_PATTERN, _bits32(quantum)))
    return np.rint(v * inverse) * quantum


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _mx_values(values, lows, tops, mant_bits, unit):
    """(underflow, overflow, sum of squared errors times unit**2) of float32 ``values`` (no
    subnormal) in MX blocks: value i's block gives ``lows[i]``, the element's smallest
    quantum, and ``tops[i]``, its largest value, both scaled and normal float32. One flat,
    branch-free loop: it vectorises (the sum in any order; everything else is exact)."""
    under = over = 0
    error = 0.0
    for i in range(len(values)):
        a = _finite_magnitude(values[i])
        r = _rounded32(a, lows[i], mant_bits)
        over += r > tops[i]
        q = min(r, tops[i])
        under += (q == 0) & (a != 0)
        d = np.float64(a - q) * unit  # a - q is exact
        error += d * d
    return under, over, error


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _nvfp4_values(values, reciprocals, dequanta, unit):
    """``_mx_values`` for nvfp4: each |x| times its block's reciprocal in float32, rounded to
    E2M1; the error taken from ``q * dequanta[i]`` in float64."""
    under = over = 0
    error = 0.0
    for i in range(len(values)):
        a = _finite_magnitude(values[i])
        r = _rounded32(a * reciprocals[i], np.float32(0.5), 1)
        over += r > 6.0
        q = min(r, np.float32(6.0))
        under += (q == 0) & (a != 0)
        d = (np.float64(a) - np.float64(q) * dequanta[i]) * unit
        error += d * d
    return under, over, error


@numba.njit(cache=True, nogil=True, inline="always")
def _element_value(a, low, top, mant_bits):
    """(q, whether it overflowed): the magnitude ``a`` (float32, no subnormal) rounded to the
    element format whose smallest quantum is ``low`` and largest value ``top`` (scaled,
    normal float32s), saturating. Exact float32 arithmetic (``_rounded32``)."""
    r = _rounded32(a, low, mant_bits)
    return min(r, top), r > top


@numba.njit(cache=True, nogil=True, inline="always")
def _aligned_blocks(bits, nb, size, finite, maxima):
    """``maxima[k]``: the largest finite |x| pattern of whole block k of ``size`` (a
    constant where this is inlined, so each block's loop unrolls); in the patterns' width,
    NaN/Inf left out unless the chunk is all ``finite``."""
    mask, inf = np.int32(0x7FFFFFFF), np.int32(0x7F800000)
    for k in range(nb):
        largest = np.int32(0)
        if finite:
            for i in range(k * size, k * size + size):
                largest = _same_width_max(largest, _same_width_and(bits[i], mask))
        else:
            for i in range(k * size, k * size + size):
                magnitude = _same_width_and(bits[i], mask)
                largest = _same_width_max(largest, _same_width_below(magnitude, inf))
        maxima[k] = largest


@numba.njit(cache=True, nogil=True, inline="always")
def _aligned_mx(values, nb, size, lows, tops, mant_bits, finite, errors):
    """(underflow, overflow) of whole MX blocks of ``size`` values (all ``finite``, or NaN/Inf
    read as 0); ``errors[i]`` the errors (exact float32). Counted in int32 lanes, so the
    loops vectorise 8 wide."""
    under = over = np.int32(0)
    for k in range(nb):
        low, top = lows[k], tops[k]
        for i in range(k * size, k * size + size):
            a = abs(values[i]) if finite else _finite_magnitude(values[i])
            q, saturated = _element_value(a, low, top, mant_bits)
            over = _same_width_add(over, np.int32(saturated))
            under = _same_width_add(under, np.int32((q == 0) & (a != 0)))
            errors[i] = a - q
    return under, over


@numba.njit(cache=True, nogil=True, inline="always")
def _aligned_nvfp4(values, nb, size, reciprocals, quantized):
    """(underflow, overflow) of whole nvfp4 blocks; ``quantized[i]`` the E2M1 values."""
    under = over = np.int32(0)
    half, six = np.float32(0.5), np.float32(6.0)
    for k in range(nb):
        reciprocal = reciprocals[k]
        for i in range(k * size, k * size + size):
            a = _finite_magnitude(values[i])
            q, saturated = _element_value(a * reciprocal, half, six, 1)
            over = _same_width_add(over, np.int32(saturated))
            under = _same_width_add(under, np.int32((q == 0) & (a != 0)))
            quantized[i] = q
    return under, over


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _nvfp4_errors(values, quantized, dequanta, size, unit):
    """The sum of ((|x| - q * dequanta[block]) * unit)**2 over whole blocks of ``size``."""
    total = 0.0
    for k in range(len(values) // size):
        dequantum = dequanta[k]
        for i in range(k * size, k * size + size):
            d = (np.float64(_finite_magnitude(values[i])) - quantized[i] * dequantum) * unit
            total += d * d
    return total


# The loops over whole blocks, compiled apart for each block size (a constant in each: the
# blocks' loops unroll) and called once a chunk: inlined into one large function, they
# were left unvectorised.
@numba.njit(cache=True, nogil=True)
def _maxima32(bits, nb, finite, maxima):
    _aligned_blocks(bits, nb, 32, finite, maxima)


@numba.njit(cache=True, nogil=True)
def _maxima16(bits, nb, finite, maxima):
    _aligned_blocks(bits, nb, 16, finite, maxima)


@numba.njit(cache=True, nogil=True)
def _mx32(values, nb, lows, tops, mant_bits, finite, errors):
    if finite:  # a constant in each inlined copy: no test in the loop
        return _aligned_mx(values, nb, 32, lows, tops, mant_bits, True, errors)
    return _aligned_mx(values, nb, 32, lows, tops, mant_bits, False, errors)


@numba.njit(cache=True, nogil=True)
def _nvfp4_16(values, nb, reciprocals, quantized):
    return _aligned_nvfp4(values, nb, 16, reciprocals, quantized)


@numba.njit(cache=True, nogil=True, inline="always")
def _mx_raw_scale(pattern, rule, emax, mant_bits, max_mantissa):
    """The MX scale exponent, before clipping, of a block whose largest |x| is the normal
    float32 of bit pattern ``pattern``."""
    raw = (pattern >> 23) - 127 - emax
    if rule == RCEIL:  # up one where amax's significand exceeds the element's largest one
        raw += ((0x800000 | (pattern & 0x7FFFFF)) << mant_bits) > (max_mantissa << 23)
    return raw


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _add_aligned(values, bits, subnormals, finite, table_row, tensor_scale, exponent, row, scratch):
    """``add_chunk_float32`` of one format over whole consecutive blocks (rows of a multiple
    of 32 values): block maxima, then each block's scale, then the values, each pass one
    vectorised loop. Returns (underflow, overflow, sum of squared errors), or underflow -1
    where the chunk needs the integer loops (its scales then counted in ``row`` all the
    same). ``scratch``: per block int64, float32, float32 and float64 arrays, then per
    value int64, float32, float32 and float64 arrays."""
    rule, size, emax, emin, mant_bits, max_mantissa, scale_lo, _ = table_row
    n = len(values)
    unit = math.ldexp(1.0, -exponent)
    scales, lows, tops, wide = scratch[0], scratch[1], scratch[2], scratch[3]
    patterns = scratch[4]  # each block's largest finite |x| (a per-value buffer, free here)
    nb = n // size
    if size == 32:
        _maxima32(bits, nb, finite, patterns)
    else:
        _maxima16(bits, nb, finite, patterns)
    exact = subnormals > 0
    if rule == NVFP4:
        reciprocal_tensor_scale = _float32(1.0 / tensor_scale)
        for k in range(nb):
            block_scale = _nvfp4_scale(_pattern_value(patterns[k]), tensor_scale, scale_lo, row)
            reciprocal = _float32(reciprocal_tensor_scale / block_scale)
            exact |= not reciprocal <= _FLOAT32_LARGEST
            lows[k] = reciprocal
            wide[k] = block_scale * tensor_scale
        if exact:
            return -1, 0, 0.0
        quantized = scratch[5][:n]
        under, over = _nvfp4_16(values, nb, lows, quantized)
        return under, over, _nvfp4_errors(values[:n], quantized, wide, 16, unit)
    if exact:  # a subnormal maximum is no float32 normal: count the scales the general way
        for k in range(nb):
            amax = _pattern_value(patterns[k])
            scale = _mx_scale(amax, rule, emax, mant_bits, max_mantissa, scale_lo, row)
            scales[k] = _exponent(scale) if amax != 0.0 else 0
        return -1, 0, 0.0
    for k in range(nb):  # the maxima are normal float32s or 0: the scale from their bits
        scale = _mx_raw_scale(patterns[k], rule, emax, mant_bits, max_mantissa)
        scale = min(max(scale, MX_SCALE_MIN), MX_SCALE_MAX) if patterns[k] != 0 else 0
        scales[k] = scale
        lows[k] = _from_bits32(np.int32((emin + scale - mant_bits + 127) << 23))
        top = _from_bits32(np.int32((emax - mant_bits + scale + 127) << 23))
        tops[k] = np.float32(max_mantissa) * top
    for k in range(nb):  # counted apart, so that the loop above vectorises
        live = patterns[k] != 0  # a block with a finite non-zero value
        raw = _mx_raw_scale(patterns[k], rule, emax, mant_bits, max_mantissa)
        row[ZERO_BLOCKS] += not live
        row[CLAMPED_LOW] += live and raw < MX_SCALE_MIN
        row[CLAMPED_HIGH] += live and raw > MX_SCALE_MAX
        row[SCALES + scales[k] - scale_lo] += live
        exact |= live and emin + scales[k] - mant_bits < -126
    if exact:
        return -1, 0, 0.0
    errors = scratch[5][:n]
    under, over = _mx32(values, nb, lows, tops, mant_bits, finite, errors)
    return under, over, _sum(errors, unit)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def add_chunk_float32(
    values, bits, subnormals, finite, offset, row_length, table, tensor_scale, exponent, rows,
    sums, scratch,
):  # fmt: skip
    """``add_chunk`` for float32 values (``bits`` their int32 patterns), read in place;
    ``scratch`` as for ``_add_aligned``.

    Rows of a multiple of 32 values: ``_add_aligned``. Other rows: the blocks' scales
    (counted), each spread over its values, then the values in one loop (``_mx_values``,
    ``_nvfp4_values``). Both in float32 (exact, see ``_rounded32``) where the chunk holds no
    subnormal and every scale keeps the element's quanta in float32's normal range; else
    in integers (``_exact_values``)."""
    n = len(values)
    unit = math.ldexp(1.0, -exponent)
    per_block = scratch[0]
    lows, tops, dequanta = scratch[5][:n], scratch[6][:n], scratch[7][:n]
    reciprocal_tensor_scale = _float32(1.0 / tensor_scale)
    aligned = row_length % _ALIGNED == 0  # every block whole and consecutive
    for f in range(table.shape[0]):
        rule, size, emax, emin, mant_bits, max_mantissa, scale_lo, _ = table[f]
        row = rows[f]
        if aligned:
            under, over, error = _add_aligned(
                values, bits, subnormals, finite, table[f], tensor_scale, exponent, row, scratch
            )
            if under < 0:
                under, over, error = _exact_values(
                    values, bits, offset, row_length, table[f], exponent, scratch
                )
        else:
            exact = subnormals > 0
            largest_mantissa = np.float32(max_mantissa)
            lo, position, block = 0, offset, 0
            while lo < n:  # each block's scale (nvfp4: reciprocal and dequantum)
                hi = min(lo + size, lo + row_length - position, n)
                amax = _pattern_value(_largest_pattern(values, lo, hi))
                if rule == NVFP4:
                    block_scale = _nvfp4_scale(amax, tensor_scale, scale_lo, row)
                    reciprocal = _float32(reciprocal_tensor_scale / block_scale)
                    exact |= not reciprocal <= _FLOAT32_LARGEST
                    tops[lo:hi] = np.float32(reciprocal)
                    dequanta[lo:hi] = block_scale * tensor_scale
                    scratch[1][block] = reciprocal
                    scratch[3][block] = block_scale * tensor_scale
                else:
                    scale = _mx_scale(amax, rule, emax, mant_bits, max_mantissa, scale_lo, row)
                    scale = _exponent(scale) if amax != 0.0 else 0  # nothing to count
                    exact |= emin + scale - mant_bits < -126
                    per_block[block] = scale
                    top = _from_bits32(np.int32((emax - mant_bits + scale + 127) << 23))
                    lows[lo:hi] = _from_bits32(np.int32((emin + scale - mant_bits + 127) << 23))
                    tops[lo:hi] = largest_mantissa * top
                position = (position + hi - lo) % row_length
                lo, block = hi, block + 1
            if exact:
                under, over, error = _exact_values(
                    values, bits, offset, row_length, table[f], exponent, scratch
                )
            elif rule == NVFP4:
                under, over, error = _nvfp4_values(values, tops, dequanta, unit)
            else:
                under, over, error = _mx_values(values, lows, tops, mant_bits, unit)
        row[UNDER] += under
        row[OVER] += over
        sums[f] += error


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _exact_values(values, bits, offset, row_length, format_row, exponent, scratch):
    """A chunk's (underflow, overflow, sum of squared errors) by the integer loops, from the
    blocks' scales (MX, ``scratch[0]``) or reciprocals and dequanta (nvfp4, ``scratch[1]``
    and ``scratch[3]``) found by the caller."""
    rule, size, emax, emin, mant_bits, max_mantissa, _, _ = format_row
    n = len(values)
    per_value_int, per_value_32, per_value_64 = scratch[4][:n], scratch[5][:n], scratch[7][:n]
    lo, position, block = 0, offset, 0
    while lo < n:  # each block's parameters spread over its values
        hi = min(lo + size, lo + row_length - position, n)
        if rule == NVFP4:
            per_value_32[lo:hi] = scratch[1][block]
            per_value_64[lo:hi] = scratch[3][block]
        else:
            per_value_int[lo:hi] = scratch[0][block]
        position = (position + hi - lo) % row_length
        lo, block = hi, block + 1
    if rule == NVFP4:
        errors = per_value_64
        under, over = _quantize_float32_bits(
            values, bits, per_value_32, per_value_64, exponent, errors
        )
        return under, over, _sum(errors, 1.0)
    errors = per_value_32
    under, over = _quantize_bits(
        bits, per_value_int, exponent, emin, emax, mant_bits, max_mantissa, errors
    )
    return under, over, _sum(errors, 1.0)


@numba.njit(cache=True, nogil=True)
def sums_exponent(amax):
    """The exponent of the sums' units for a tensor whose largest finite magnitude is
    ``amax``: floor(log2(amax)) within -1022 .. 1022, so that its power of two and the
    reciprocal are normal (0 for no such value)."""
    return min(max(_exponent(amax), -1022), 1022) if amax > 0 else 0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def tensor_scale(amax):
    """nvfp4's per-tensor scale, float32(amax) / (448 * 6) in float32 (as a float64)."""
    return _float32(_float32(amax) / (448.0 * 6.0))
