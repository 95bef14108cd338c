"""Block formats over a chunk of float32 values in integers on their bit patterns: for the
chunks that ``_blocks_float32`` cannot take exactly (subnormals on a CPU that reads them
as 0, such as XLA's threads or ``torch.set_flush_denormal``; nvfp4 under a tiny per-tensor
scale). Slow (several ns a value) and rare.

Each block's parameters (MX: its scale exponent; nvfp4: its float32 reciprocal and its
dequantization factor) are spread over its values, which are then rounded one by one.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from tandv_tb.formats.blocks import NVFP4_EMAX, NVFP4_EMIN, NVFP4_MANTISSA_BITS, NVFP4_MAX_MANTISSA
from tandv_tb.stats._bit_ops import bits32, float32_of
from tandv_tb.stats._block_scales import exponent_of, float32, nvfp4_scale


@numba.njit(nogil=True, inline="always")
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
    exponent = field - 127 if normal else exponent_of(np.float64(magnitude)) - 149
    e = exponent - scale  # of the value in element units
    shift = min(max(e, emin) - mant_bits + scale - low, 26)
    rounded = (m + (1 << (shift - 1)) - 1 + ((m >> shift) & 1)) >> shift
    over = (e == emax) & (rounded > max_mantissa)
    return (max_mantissa if over else rounded), shift, m, low, over


@numba.njit(nogil=True, inline="always")
def _pattern_value(pattern):
    """The float64 of a non-negative float32 bit pattern, a subnormal through its integer
    mantissa (flush-to-zero mode would read it as 0)."""
    if pattern < 0x800000:
        return np.float64(pattern) * 2.0**-149
    return np.float64(float32_of(pattern))


@numba.njit(nogil=True, fastmath={"reassoc"})
def _sum_of_squares(values):
    """The sum of values[i]**2 in float64, in any order (so that it vectorises)."""
    total = 0.0
    for i in range(len(values)):
        s = np.float64(values[i])
        total += s * s
    return total


@numba.njit(nogil=True)
def _spread(per_block, starts, nb, per_value):
    """Each block's ``per_block[k]`` over its values."""
    for k in range(nb):
        per_value[starts[k] : starts[k + 1]] = per_block[k]


@numba.njit(nogil=True)
def mx_values(bits, starts, nb, exponents, format_row, exponent, scales, errors):
    """(underflow, overflow, sum of squared errors in the sums' units) of MX blocks of
    float32 bit patterns (NaN/Inf read as 0 and not counted) whose scale exponents are
    ``exponents`` (``_block_scales.mx_scales``). ``scales`` (int64) and ``errors``
    (float32) are per-value buffers; an error below float32's normal range (less than
    2**-126 of the tensor's largest value: far below any sum's rounding) is left out."""
    _, _, emax, emin, mant_bits, max_mantissa, _, _ = format_row
    n = starts[nb]
    scales, errors = scales[:n], errors[:n]
    _spread(exponents, starts, nb, scales)
    under = over = 0
    for i in range(n):
        magnitude = bits[i] & 0x7FFFFFFF
        magnitude = magnitude if magnitude < 0x7F800000 else 0
        q, shift, m, low, saturated = _round_bits(
            magnitude, scales[i], emin, emax, mant_bits, max_mantissa
        )
        under += (q == 0) & (magnitude != 0)
        over += saturated
        field = low - exponent + 127
        unit = float32_of(field << 23) if field > 0 else np.float32(0.0)
        errors[i] = np.float32(m - (q << shift)) * unit
    return under, over, _sum_of_squares(errors)


@numba.njit(nogil=True, error_model="numpy")
def nvfp4_scales(patterns, nb, tensor_scale, scale_lo, row, reciprocals, dequanta):
    """``_block_scales.nvfp4_scale`` of each block (counted in ``row``): its float32
    reciprocal (``reciprocals``) and ``block_scale * tensor_scale`` (``dequanta``)."""
    reciprocal_tensor_scale = float32(1.0 / tensor_scale)
    for k in range(nb):
        block_scale = nvfp4_scale(_pattern_value(patterns[k]), tensor_scale, scale_lo, row)
        reciprocals[k] = float32(reciprocal_tensor_scale / block_scale)
        dequanta[k] = block_scale * tensor_scale


@numba.njit(nogil=True)
def nvfp4_values(bits, starts, nb, reciprocals, dequanta, exponent, per_value, errors):
    """``mx_values`` for nvfp4 blocks (``nvfp4_scales``): each |x| times its block's
    reciprocal, rounded to float32 by ``float32`` (so that no subnormal is flushed), then
    to E2M1 in integers (a product below float32's normal range rounds to 0). ``per_value``
    (float32) and ``errors`` (float64) are per-value buffers."""
    n = starts[nb]
    reciprocal, errors = per_value[:n], errors[:n]
    _spread(reciprocals, starts, nb, reciprocal)
    _spread(dequanta, starts, nb, errors)
    under = over = 0
    unit = math.ldexp(1.0, -exponent)
    for i in range(n):
        magnitude = bits[i] & 0x7FFFFFFF
        a = _pattern_value(magnitude if magnitude < 0x7F800000 else 0)
        v = float32(a * reciprocal[i])  # the float32 product, exact in float64 first
        q, shift, _, low, saturated = _round_bits(
            bits32(np.float32(v)) if v >= 2.0**-126 else 0,
            0,
            NVFP4_EMIN,
            NVFP4_EMAX,
            NVFP4_MANTISSA_BITS,
            NVFP4_MAX_MANTISSA,
        )
        under += (q == 0) & (a != 0.0)
        over += saturated
        element = math.ldexp(np.float64(q), low + shift) if q != 0 else 0.0
        errors[i] = (a - element * errors[i]) * unit
    return under, over, _sum_of_squares(errors)
