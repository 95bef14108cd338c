"""The CPU kernel's block-scaled formats (``tandv_tb.block_formats``): compiled (numba) loops
over one cached chunk of values, called by ``_cpu_kernel`` while the chunk is in the cache.

Every value is first taken as its exact magnitude in float64 (``magnitudes``: non-finite
values as 0, float32 subnormals through their bit patterns, so a CPU in flush-to-zero mode
counts them all the same). Each format then walks the chunk's blocks (chunks begin and end
on block boundaries, ``_cpu_kernel`` sees to it): the block's largest magnitude gives its
scale, and each value divided by the scale is rounded to the element format in float64,
``rint(v / q) * q`` with ``q`` the element's quantum at ``v``'s exponent (exact: powers of
two), which is round to nearest, ties to even. nvfp4's scales follow torchao's float32
arithmetic, each operation done in float64 and rounded to float32 by ``_float32`` (exact:
float64 holds twice float32's precision and more, so no result is rounded twice wrongly).

A format's counts are a flat int64 row: underflow, overflow, zero blocks, blocks clamped
low, clamped high, then blocks per scale exponent; its sums: the squares of the values and
of their errors, in units of ``4**exponent`` (``exponent`` the same for all formats).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from tandv_tb.block_formats import MX_SCALE_MAX, MX_SCALE_MIN, NVFP4, RCEIL

#: Fields of a format's counts row before its scale exponents.
UNDER, OVER, ZERO_BLOCKS, CLAMPED_LOW, CLAMPED_HIGH, SCALES = range(6)
_MANTISSA = (1 << 52) - 1


@intrinsic
def _bits(typingctx, value):
    """The bit pattern of a float64 as an int64."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))

    return types.int64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, pattern):
    """The float64 of a bit pattern."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return types.float64(types.int64), codegen


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
def _quantize(a, lo, hi, inverse, factor, emin, mant_bits, largest, row):
    """Counts of ``a[lo:hi]`` times ``inverse`` (a power of two) rounded to the element
    format; returns the sum of squared errors, each times ``factor``."""
    under = over = 0
    error = 0.0
    for i in range(lo, hi):
        v = a[i] * inverse
        q = _round_element(v, emin, mant_bits)
        over += q > largest
        q = min(q, largest)
        under += (q == 0.0) & (a[i] != 0.0)
        d = (v - q) * factor
        error += d * d
    row[UNDER] += under
    row[OVER] += over
    return error


@numba.njit(cache=True, nogil=True)
def _quantize_float32(a, lo, hi, reciprocal, wide, largest, dequantum, factor, row):
    """nvfp4's elements: each value rounded to float32 (``wide``: a float64 input), times
    ``reciprocal`` in float32, rounded to E2M1 (a product below float32's normal range
    rounds to 0 in E2M1 whether flushed or not)."""
    under = over = 0
    error = 0.0
    for i in range(lo, hi):
        x = _float32(a[i]) if wide else a[i]
        v = np.float64(np.float32(x * reciprocal)) if x != 0.0 else 0.0
        q = _round_element(v, 0, 1)
        over += q > largest
        q = min(q, largest)
        under += (q == 0.0) & (a[i] != 0.0)
        d = (a[i] - q * dequantum) * factor
        error += d * d
    row[UNDER] += under
    row[OVER] += over
    return error


@numba.njit(cache=True, nogil=True)
def _mx_block(a, lo, hi, rule, emax, emin, mant_bits, max_mantissa, scale_lo, exponent, row):
    """One MX block's counts; returns its sum of squared errors."""
    amax = 0.0
    for i in range(lo, hi):
        amax = max(amax, a[i])
    if amax == 0.0:
        row[ZERO_BLOCKS] += 1
        return 0.0
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
    largest = math.ldexp(np.float64(max_mantissa), emax - mant_bits)
    factor = math.ldexp(1.0, scale - exponent)
    inverse = _power_of_two(-scale)
    return _quantize(a, lo, hi, inverse, factor, emin, mant_bits, largest, row)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _nvfp4_block(a, lo, hi, tensor_scale, wide, exponent, scale_lo, row):
    """One nvfp4 block's counts (torchao's ``nvfp4_quantize`` with ``per_tensor_scale``);
    returns its sum of squared errors."""
    amax = 0.0
    for i in range(lo, hi):
        amax = max(amax, a[i])
    amax = _float32(amax)
    smallest = 2.0**-6
    if amax == 0.0:
        row[ZERO_BLOCKS] += 1
        block_scale = smallest
    else:
        raw = _float32(_float32(amax / 6.0) / tensor_scale)
        row[CLAMPED_LOW] += raw < smallest
        row[CLAMPED_HIGH] += raw > 448.0
        clamped = min(max(raw, smallest), 448.0) if raw == raw else smallest  # NaN: none
        step = _power_of_two(_exponent(clamped) - 3)  # E4M3: 3 mantissa bits, normal here
        block_scale = np.rint(clamped / step) * step
        row[SCALES + _exponent(block_scale) - scale_lo] += 1
    reciprocal = _float32(_float32(1.0 / tensor_scale) / block_scale)
    factor = math.ldexp(1.0, -exponent)
    dequantum = block_scale * tensor_scale
    return _quantize_float32(a, lo, hi, reciprocal, wide, 6.0, dequantum, factor, row)


@numba.njit(cache=True, nogil=True)
def add_chunk(a, offset, row_length, table, tensor_scale, wide, exponent, rows, sums):
    """Adds the block formats' counts (``rows[f]``) and sums (``sums[f]``: signal, error)
    of the magnitudes ``a`` of one chunk, whose first value lies ``offset`` values into its
    row of ``row_length``; ``table`` describes the formats (``BlockFormat.kernel_row``)."""
    factor = math.ldexp(1.0, -exponent)
    signal = 0.0
    for i in range(len(a)):
        s = a[i] * factor
        signal += s * s
    for f in range(table.shape[0]):
        rule, size, emax, emin, mant_bits, max_mantissa, scale_lo, _ = table[f]
        row = rows[f]
        error = 0.0
        lo, position = 0, offset
        while lo < len(a):
            hi = min(lo + size, lo + row_length - position, len(a))
            if rule == NVFP4:
                error += _nvfp4_block(a, lo, hi, tensor_scale, wide, exponent, scale_lo, row)
            else:
                error += _mx_block(
                    a, lo, hi, rule, emax, emin, mant_bits, max_mantissa, scale_lo, exponent, row
                )
            position = (position + hi - lo) % row_length
            lo = hi
        sums[f, 0] += signal
        sums[f, 1] += error


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
