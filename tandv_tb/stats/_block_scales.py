"""Each block's scale from its largest finite magnitude (``tandv_tb.formats.blocks``), counted
in its format's row: zero blocks, blocks clamped low or high, blocks per scale exponent.

A format's row is flat int64: ``UNDER``, ``OVER`` (added by the value loops), then
``ZERO_BLOCKS``, ``CLAMPED_LOW``, ``CLAMPED_HIGH`` and from ``SCALES`` on the blocks per
scale exponent, from the format's lowest (``BlockFormat.scale_range``).

Two forms of each rule:
- from float64 maxima, one block at a time (``mx_scale``, ``nvfp4_scale``): for float64
  arrays and wherever float32 arithmetic could meet a subnormal operand. nvfp4's float32
  operations are done in float64 and rounded by ``float32``, which flush-to-zero mode
  cannot change (float64 holds more than twice float32's precision, so no result is
  rounded twice wrongly);
- from float32 maxima' bit patterns, a chunk's blocks at a time in vector lanes
  (``mx_scales``, ``nvfp4_scales``): MX in integers; nvfp4 in float32 arithmetic, equal to
  the float64 form where ``nvfp4_in_lanes`` says so.
"""

from __future__ import annotations

import numba
import numpy as np

from tandv_tb.formats.blocks import (
    MX_SCALE_MAX,
    MX_SCALE_MIN,
    NVFP4_ELEMENT_MAX,
    NVFP4_SCALE_MANTISSA_BITS,
    NVFP4_SCALE_MAX,
    NVFP4_SCALE_MIN,
    NVFP4_TENSOR_DIVISOR,
    RCEIL,
)
from tandv_tb.stats._bit_ops import (
    _same_width_add,
    _same_width_and,
    _same_width_max,
    _same_width_min,
    _same_width_sub,
    bits32,
    bits64,
    float32_of,
    float64_of,
)

#: Fields of a format's counts row before its scale exponents.
UNDER, OVER, ZERO_BLOCKS, CLAMPED_LOW, CLAMPED_HIGH, SCALES = range(6)
_MANTISSA = (1 << 52) - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: nvfp4's block scales are clamped to this range before they are rounded to E4M3.
_NVFP4_LOWEST, _NVFP4_HIGHEST = 2.0**NVFP4_SCALE_MIN, NVFP4_SCALE_MAX
#: E4M3's rounding on a float32 bit pattern: the mantissa bits it drops, and half an ulp
#: less one.
_E4M3_DROPPED = 23 - NVFP4_SCALE_MANTISSA_BITS
_E4M3_HALF = (1 << (_E4M3_DROPPED - 1)) - 1
#: nvfp4 in float32 lanes needs a per-tensor scale from this on: then a block whose
#: ``amax / 6`` is subnormal (flushed to 0 in flush-to-zero mode) has a raw scale far below
#: ``_NVFP4_LOWEST`` either way, and every reciprocal is finite.
_NVFP4_LANES_TENSOR_SCALE = 2.0**-120


@numba.njit(nogil=True, inline="always")
def power_of_two(exponent):
    """2**exponent for a float64 normal exponent."""
    return float64_of((exponent + 1023) << 52)


@numba.njit(nogil=True, inline="always")
def exponent_of(value):
    """floor(log2(value)) of a positive normal float64 (-1023 for 0 and subnormals)."""
    return (bits64(value) >> 52) - 1023


@numba.njit(nogil=True, inline="always")
def float32(value):
    """``value >= 0`` rounded to float32 (to nearest, ties to even), saturating at its
    largest value, as a float64; below float32's normal range by ``rint``, so flush-to-zero
    mode cannot flush it."""
    normal = np.float64(np.float32(min(value, _FLOAT32_MAX)))
    tiny = np.rint(value * 2.0**149) * 2.0**-149
    return normal if value >= 2.0**-126 else tiny


@numba.njit(nogil=True, inline="always")
def mx_scale(amax, rule, emax, mant_bits, max_mantissa, scale_lo, row):
    """One MX block's scale 2**X (counted in ``row``) from its largest magnitude."""
    if amax == 0.0:
        row[ZERO_BLOCKS] += 1
        return power_of_two(MX_SCALE_MIN)
    scale = exponent_of(amax) - emax
    if rule == RCEIL:  # up one where amax's significand exceeds the element's largest one
        significand = ((1 << 52) | (bits64(amax) & _MANTISSA)) << mant_bits
        scale += significand > (max_mantissa << 52)
    if scale < MX_SCALE_MIN:
        row[CLAMPED_LOW] += 1
        scale = MX_SCALE_MIN
    elif scale > MX_SCALE_MAX:
        row[CLAMPED_HIGH] += 1
        scale = MX_SCALE_MAX
    row[SCALES + scale - scale_lo] += 1
    return power_of_two(scale)


@numba.njit(nogil=True, error_model="numpy", inline="always")
def nvfp4_scale(amax, tensor_scale, scale_lo, row):
    """One nvfp4 block's E4M3 scale (counted in ``row``) from its largest magnitude, by
    torchao's ``nvfp4_quantize`` with ``per_tensor_scale``."""
    amax = float32(amax)
    if amax == 0.0:
        row[ZERO_BLOCKS] += 1
        return _NVFP4_LOWEST
    raw = float32(float32(amax / NVFP4_ELEMENT_MAX) / tensor_scale)
    row[CLAMPED_LOW] += raw < _NVFP4_LOWEST
    row[CLAMPED_HIGH] += raw > _NVFP4_HIGHEST
    clamped = min(max(raw, _NVFP4_LOWEST), _NVFP4_HIGHEST) if raw == raw else _NVFP4_LOWEST
    step = power_of_two(exponent_of(clamped) - NVFP4_SCALE_MANTISSA_BITS)  # E4M3, normal here
    block_scale = np.rint(clamped / step) * step
    row[SCALES + exponent_of(block_scale) - scale_lo] += 1
    return block_scale


@numba.njit(nogil=True, error_model="numpy")
def tensor_scale(amax):
    """nvfp4's per-tensor scale, float32(amax) / (448 * 6) in float32 (as a float64)."""
    return float32(float32(amax) / NVFP4_TENSOR_DIVISOR)


@numba.njit(nogil=True, inline="always")
def nvfp4_in_lanes(tensor_scale):
    """Whether ``nvfp4_scales`` (float32 lanes) gives ``nvfp4_scale``'s scales for a tensor
    of this per-tensor scale, in any floating-point mode."""
    return tensor_scale >= _NVFP4_LANES_TENSOR_SCALE


@numba.njit(nogil=True, inline="always")
def mx_scale_of_pattern(pattern, carry, bias):
    """(raw X, X clipped to the scale's range) of an MX block whose largest finite |x| is
    the float32 of bit pattern ``pattern``: its exponent field less ``bias`` (127 + emax),
    plus one where adding ``carry`` (``mx_carry``) carries out of the mantissa field. A
    subnormal maximum clamps low, as its true exponent would."""
    raw = _same_width_sub(_same_width_add(pattern, carry) >> 23, bias)
    return raw, _same_width_min(
        _same_width_max(raw, np.int32(MX_SCALE_MIN)), np.int32(MX_SCALE_MAX)
    )


@numba.njit(nogil=True, inline="always")
def mx_carry(rule, mant_bits, max_mantissa):
    """What ``mx_scale_of_pattern`` adds to a pattern: with ``RCEIL``, the amount that
    carries out of the mantissa field exactly when amax's significand exceeds the
    element's largest (then the scale is one up); none for the OCP rule."""
    largest_field = (max_mantissa << (23 - mant_bits)) & 0x7FFFFF
    return np.int32(0x7FFFFF - largest_field if rule == RCEIL else 0)


@numba.njit(nogil=True)
def _count_scales(patterns, exponents, nb, scale_lo, tables):
    """Adds each live block's (non-zero ``patterns[k]``) scale exponent to ``tables``: four
    tables taken in turn, so that runs of blocks with one scale do not wait on one
    counter."""
    whole = nb // 4 * 4
    for k in range(0, whole, 4):
        for t in range(4):
            tables[t, exponents[k + t] - scale_lo] += patterns[k + t] != 0
    for k in range(whole, nb):
        tables[0, exponents[k] - scale_lo] += patterns[k] != 0


@numba.njit(nogil=True)
def _add_tables(tables, width, row):
    for j in range(width):
        row[SCALES + j] += tables[0, j] + tables[1, j] + tables[2, j] + tables[3, j]
        tables[:, j] = 0


@numba.njit(nogil=True, error_model="numpy")
def mx_scales(patterns, nb, format_row, row, exponents, tables):
    """The MX scale exponents X of ``nb`` blocks whose largest finite |x| are the float32
    bit patterns ``patterns`` (0: no finite non-zero value), counted in ``row``, in int32
    lanes (``mx_scale_of_pattern``)."""
    rule, _, emax, _, mant_bits, max_mantissa, scale_lo, width = format_row
    carry, bias = mx_carry(rule, mant_bits, max_mantissa), np.int32(127 + emax)
    zero = low = high = np.int32(0)
    for k in range(nb):
        pattern = patterns[k]
        raw, scale = mx_scale_of_pattern(pattern, carry, bias)
        live = np.int32(pattern != 0)
        zero = _same_width_add(zero, np.int32(pattern == 0))
        low = _same_width_add(low, _same_width_and(live, np.int32(raw < MX_SCALE_MIN)))
        high = _same_width_add(high, _same_width_and(live, np.int32(raw > MX_SCALE_MAX)))
        exponents[k] = scale
    row[ZERO_BLOCKS] += zero
    row[CLAMPED_LOW] += low
    row[CLAMPED_HIGH] += high
    _count_scales(patterns, exponents, nb, scale_lo, tables)
    _add_tables(tables, width, row)


@numba.njit(nogil=True, error_model="numpy")
def nvfp4_scales(patterns, nb, tensor_scale, row, exponents, reciprocals, scales):
    """``nvfp4_scale`` of ``nb`` blocks whose largest finite |x| are the float32 bit
    patterns ``patterns``, in float32 lanes (only where ``nvfp4_in_lanes``), their zero
    and clamped blocks counted in ``row``: ``scales[k]`` is the E4M3 block scale,
    ``reciprocals[k]`` torchao's ``(1 / per_tensor_scale) / block_scale`` (float32) and
    ``exponents[k]`` the scale's exponent, which the caller counts. The E4M3 rounding (3
    mantissa bits, ties to even) is done on the pattern."""
    tensor_scale32 = np.float32(tensor_scale)
    reciprocal_tensor_scale = np.float32(float32(1.0 / tensor_scale))
    lowest, highest = np.float32(_NVFP4_LOWEST), np.float32(_NVFP4_HIGHEST)
    zero = low = high = np.int32(0)
    for k in range(nb):
        pattern = patterns[k]
        raw = (float32_of(pattern) / np.float32(NVFP4_ELEMENT_MAX)) / tensor_scale32
        live = np.int32(pattern != 0)
        zero = _same_width_add(zero, np.int32(pattern == 0))
        low = _same_width_add(low, _same_width_and(live, np.int32(raw < lowest)))
        high = _same_width_add(high, np.int32(raw > highest))
        clamped = bits32(min(max(raw, lowest), highest))
        odd = _same_width_and(clamped >> _E4M3_DROPPED, np.int32(1))
        rounded = _same_width_and(
            _same_width_add(clamped, _same_width_add(np.int32(_E4M3_HALF), odd)),
            np.int32(-(1 << _E4M3_DROPPED)),
        )
        scales[k] = float32_of(rounded)
        reciprocals[k] = reciprocal_tensor_scale / float32_of(rounded)
        exponents[k] = _same_width_sub(rounded >> 23, np.int32(127))
    row[ZERO_BLOCKS] += zero
    row[CLAMPED_LOW] += low
    row[CLAMPED_HIGH] += high
