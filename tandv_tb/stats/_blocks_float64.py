"""Block formats over a chunk of a float64 array, in float64 from the values' exact
magnitudes (float64 arrays are rare in training; this path is plain and scalar-blocked).

Each value divided by its block's scale is rounded to the element format as ``rint(v / q) *
q``, ``q`` the element's quantum at ``v``'s exponent (exact: powers of two), which is round
to nearest, ties to even. nvfp4 follows torchao's float32 arithmetic (``_block_scales``):
its elements are the float32 products of the values (rounded to float32 first, as
torchao's ``.float()``) and the block's reciprocal.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from tandv_tb.formats.blocks import (
    MX_BLOCK,
    NVFP4,
    NVFP4_ELEMENT_MAX,
    NVFP4_EMIN,
    NVFP4_MANTISSA_BITS,
)
from tandv_tb.stats._bit_ops import bits64, float64_of
from tandv_tb.stats._block_scales import (
    OVER,
    UNDER,
    exponent_of,
    float32,
    mx_scale,
    nvfp4_scale,
    power_of_two,
)


@numba.njit(nogil=True)
def magnitudes(values, bits, sign_mask, inf_bits, out):
    """``out[i]`` = |values[i]| as float64, 0 for NaN/Inf; a float64 subnormal (which no
    block format can hold, and whose square is 0 in float64) as 2**-1022."""
    for i in range(len(values)):
        magnitude = bits[i] & sign_mask
        normal = abs(values[i]) if magnitude >= (1 << 52) else 2.0**-1022
        out[i] = normal if (magnitude < inf_bits) & (magnitude != 0) else 0.0


@numba.njit(nogil=True, inline="always")
def _round_element(v, emin, mant_bits):
    """v >= 0 rounded to nearest, ties to even, at the element format's precision, with no
    upper limit on the exponent."""
    quantum = max(exponent_of(v), emin) - mant_bits
    return np.rint(v * power_of_two(-quantum)) * power_of_two(quantum)


@numba.njit(nogil=True)
def _quantize(a, scales, unit, emin, mant_bits, largest, errors):
    """(underflow, overflow) of the magnitudes ``a``, each divided by its block's scale
    ``scales[i]`` (a power of two) and rounded to the element format; ``errors[i]`` is
    its error times ``unit``. Branch-free with no float sum, so it vectorises."""
    under = over = 0
    for i in range(len(a)):
        inverse = float64_of((2046 << 52) - bits64(scales[i]))  # 1 / scales[i], exactly
        q = _round_element(a[i] * inverse, emin, mant_bits)
        over += q > largest
        q = min(q, largest)
        under += (q == 0.0) & (a[i] != 0.0)
        errors[i] = (a[i] - q * scales[i]) * unit
    return under, over


@numba.njit(nogil=True)
def _quantize_nvfp4(a, reciprocals, dequanta, unit, errors):
    """nvfp4's (underflow, overflow): each magnitude rounded to float32, times its block's
    ``reciprocals[i]`` in float32, rounded to E2M1 (a product below float32's normal range
    rounds to 0 in E2M1 whether flushed or not); ``errors[i]`` as in ``_quantize``, the
    dequantized value being ``q * dequanta[i]``."""
    under = over = 0
    for i in range(len(a)):
        x = float32(a[i])
        v = np.float64(np.float32(x * reciprocals[i])) if x != 0.0 else 0.0
        q = _round_element(v, NVFP4_EMIN, NVFP4_MANTISSA_BITS)
        over += q > NVFP4_ELEMENT_MAX
        q = min(q, NVFP4_ELEMENT_MAX)
        under += (q == 0.0) & (a[i] != 0.0)
        errors[i] = (a[i] - q * dequanta[i]) * unit
    return under, over


@numba.njit(nogil=True, fastmath={"reassoc"})
def _sum_of_squares(values):
    """The sum of values[i]**2, in any order (so that it vectorises)."""
    total = 0.0
    for i in range(len(values)):
        total += values[i] * values[i]
    return total


@numba.njit(nogil=True)
def _largest(a, lo, hi):
    """max(a[lo:hi]) of magnitudes, compared as bit patterns (so that it vectorises)."""
    largest = 0
    for i in range(lo, hi):
        largest = max(largest, bits64(a[i]))
    return float64_of(largest)


@numba.njit(nogil=True, error_model="numpy")
def add_chunk(a, starts, nb, table, taken, tensor_scale, exponent, to_units, rows, sums, scratch):
    """Adds the block formats' counts (``rows[f]``) and sums of squared errors (``sums[f]``,
    in units of ``4**exponent``, times ``to_units``) of the magnitudes ``a``
    (``magnitudes``) of one chunk,
    whose blocks start at ``starts[size][k]`` (``starts[size][nb[size]]`` its end; by block
    size); ``table`` describes the formats (``BlockFormat.kernel_row``); ``scratch`` holds
    three float64 arrays at least as long as ``a``."""
    n = len(a)
    unit = math.ldexp(1.0, -exponent)
    first, second, errors = scratch[0][:n], scratch[1][:n], scratch[2][:n]
    reciprocal_tensor_scale = float32(1.0 / tensor_scale)
    for f in range(table.shape[0]):
        if not taken[f]:
            continue
        rule, size, emax, emin, mant_bits, max_mantissa, scale_lo, _ = table[f]
        row = rows[f]
        block_starts = starts[0] if size == MX_BLOCK else starts[1]
        for k in range(nb[0] if size == MX_BLOCK else nb[1]):
            lo, hi = block_starts[k], block_starts[k + 1]
            amax = _largest(a, lo, hi)
            if rule == NVFP4:
                block_scale = nvfp4_scale(amax, tensor_scale, scale_lo, row)
                first[lo:hi] = float32(reciprocal_tensor_scale / block_scale)
                second[lo:hi] = block_scale * tensor_scale
            else:
                first[lo:hi] = mx_scale(amax, rule, emax, mant_bits, max_mantissa, scale_lo, row)
        if rule == NVFP4:
            under, over = _quantize_nvfp4(a, first, second, unit, errors)
        else:
            largest = math.ldexp(np.float64(max_mantissa), emax - mant_bits)
            under, over = _quantize(a, first, unit, emin, mant_bits, largest, errors)
        row[UNDER] += under
        row[OVER] += over
        sums[f] += _sum_of_squares(errors) * to_units
