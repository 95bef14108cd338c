"""Block formats over a chunk of float32 values in vector lanes: each block's largest
magnitude, then (with its scale, ``_block_scales``) its values' underflow, overflow and
squared errors, one block of 16 or 32 values a vector (``_lanes``).

Each value is divided by its block's scale and rounded to the element format in float32
arithmetic that is exact: ``v = |x| * 2**-X`` (MX; exact while ``v`` is normal, and a
subnormal ``v`` rounds to 0 whatever it is) or torchao's float32 product ``|x| *
reciprocal`` (nvfp4), then ``(v + c) - c`` with ``c = 1.5 * 2**(23 - m)`` times the
element's quantum at ``v`` (``m`` mantissa bits): the addition rounds ``v`` to nearest,
ties to even, at that quantum, and the subtraction is exact. ``v`` saturates at the
element's largest value; it underflows where it is at most half the smallest subnormal (a
tie rounds to the even 0). Zeros, NaN and Inf (read as 0) and the zeros that pad a short
block count as underflow here; the caller takes them off.

The errors are squared and summed in float64: MX's ``(v - q) * 2**(X - exponent)`` (exact
in float32 down to float32's normal range, far below any sum's rounding), nvfp4's ``|x| -
q * block_scale * tensor_scale`` (``q * block_scale`` exact in float32, its product with
the tensor scale exact in float64: one rounding, as the reference's). nvfp4's sum is of
the raw errors (float32 magnitudes, whose squares stay normal float64s), scaled by the
caller.

Exact in any floating-point mode where the chunk holds no subnormal or the CPU reads
subnormal operands as they are (``_cpu_blocks`` checks); nvfp4 also needs
``_block_scales.nvfp4_in_lanes``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from tandv_tb.stats import _lanes
from tandv_tb.stats._bit_ops import bits32

_F32, _F64, _I32 = ir.FloatType(), ir.DoubleType(), ir.IntType(32)
_FLOAT32_LARGEST = np.float32(np.finfo(np.float32).max)


def _element(mant_bits, emin, max_mantissa, emax):
    """The float32 constants of an element format's rounding (see the module's docstring):
    (c per unit of quantum's binade, smallest c, largest value, underflow threshold)."""
    return (
        np.float32(1.5 * 2.0 ** (23 - mant_bits)),
        np.float32(1.5 * 2.0 ** (23 - mant_bits + emin)),
        np.float32(math.ldexp(max_mantissa, emax - mant_bits)),
        np.float32(2.0 ** (emin - mant_bits - 1)),
    )


element = numba.njit(nogil=True, inline="always")(_element)


def _rounded(builder, v, element):
    """(q, saturated, underflowed) of the float32 vector ``v >= 0`` rounded to the element
    format that ``element`` (``_element``'s tuple) describes."""
    floats, patterns = v.type, _lanes.vector_of(_I32, v.type.count)
    per_binade, smallest, largest, underflow_at = (
        _lanes.splat(builder, floats, builder.extract_value(element, k)) for k in range(4)
    )
    binade = builder.and_(builder.bitcast(v, patterns), _lanes.constant(patterns, 0x7F800000))
    c = _lanes.larger(builder, builder.fmul(builder.bitcast(binade, floats), per_binade), smallest)
    r = builder.fsub(builder.fadd(v, c), c)
    saturated = builder.fcmp_ordered(">", r, largest)
    underflowed = builder.fcmp_ordered("<=", v, underflow_at)
    return _lanes.smaller(builder, r, largest), saturated, underflowed


def _square_into(builder, errors, d):
    """Adds the squares of the float64 vector ``d`` to the accumulator ``errors``."""
    pointer = builder.bitcast(errors, d.type.as_pointer())
    builder.store(_lanes.fmuladd(builder, d, d, builder.load(pointer)), pointer)


def _counts(context, builder, saturated, underflowed):
    pair = types.UniTuple(types.int64, 2)
    counts = [_lanes.count_true(builder, m) for m in (underflowed, saturated)]
    return context.make_tuple(builder, pair, counts)


@intrinsic(prefer_literal=True)
def _mx_block(typingctx, values, start, lanes, finite, inverse, unit, element, errors):
    """(underflow, overflow) of the MX block ``values[start:start + lanes]`` whose scale is
    ``1 / inverse``; the squares of its errors times ``unit`` added to ``errors``."""
    count, all_finite = lanes.literal_value, finite.literal_value

    def codegen(context, builder, signature, args):
        floats = _lanes.vector_of(_F32, count)
        x = _lanes.load(context, builder, signature.args[0], args[0], args[1], count)
        a = builder.bitcast(_lanes.magnitude_patterns(builder, x, all_finite), floats)
        v = builder.fmul(a, _lanes.splat(builder, floats, args[4]))
        q, saturated, underflowed = _rounded(builder, v, args[6])
        d = builder.fmul(builder.fsub(v, q), _lanes.splat(builder, floats, args[5]))
        _square_into(builder, args[7], builder.fpext(d, _lanes.vector_of(_F64, count)))
        return _counts(context, builder, saturated, underflowed)

    pair = types.UniTuple(types.int64, 2)
    return pair(values, start, lanes, finite, inverse, unit, element, errors), codegen


@intrinsic(prefer_literal=True)
def _nvfp4_block(typingctx, values, start, lanes, finite, reciprocal, scale, tensor_scale, errors):
    """(underflow, overflow) of the nvfp4 block ``values[start:start + lanes]`` whose
    reciprocal and E4M3 scale are given; the squares of its raw errors added to
    ``errors``."""
    count, all_finite = lanes.literal_value, finite.literal_value

    def codegen(context, builder, signature, args):
        floats, doubles = _lanes.vector_of(_F32, count), _lanes.vector_of(_F64, count)
        x = _lanes.load(context, builder, signature.args[0], args[0], args[1], count)
        a = builder.bitcast(_lanes.magnitude_patterns(builder, x, all_finite), floats)
        v = builder.fmul(a, _lanes.splat(builder, floats, args[4]))
        e2m1 = context.make_tuple(
            builder, types.UniTuple(types.float32, 4),
            [ir.Constant(_F32, c) for c in (1.5 * 2.0**22, 1.5 * 2.0**22, 6.0, 0.25)],
        )  # fmt: skip
        q, saturated, underflowed = _rounded(builder, v, e2m1)
        scaled = builder.fpext(builder.fmul(q, _lanes.splat(builder, floats, args[5])), doubles)
        minus_tensor_scale = _lanes.splat(builder, doubles, builder.fneg(args[6]))
        d = _lanes.fmuladd(builder, scaled, minus_tensor_scale, builder.fpext(a, doubles))
        _square_into(builder, args[7], d)
        return _counts(context, builder, saturated, underflowed)

    pair = types.UniTuple(types.int64, 2)
    return pair(values, start, lanes, finite, reciprocal, scale, tensor_scale, errors), codegen


@numba.njit(nogil=True, inline="always")
def _padded(values, start, length, pad):
    """A short block copied to the front of ``pad``, zeros after it."""
    pad[:] = 0.0
    pad[:length] = values[start : start + length]
    return pad


@numba.njit(nogil=True, inline="always")
def _largest_of(values, starts, nb, size, finite, patterns):
    for k in range(nb):
        start, length = starts[k], starts[k + 1] - starts[k]
        if length == size:
            patterns[k] = _lanes.largest_magnitude(values, start, size, finite)
        else:
            largest = np.int32(0)
            for i in range(start, start + length):
                a = abs(values[i])
                largest = max(largest, bits32(a) if a <= _FLOAT32_LARGEST else np.int32(0))
            patterns[k] = largest


@numba.njit(nogil=True)
def largest_magnitudes(values, starts, nb, size, finite, patterns):
    """``patterns[k]``: the bit pattern of block k's largest finite |x| (0 for none), the
    blocks starting at ``starts[k]`` (``starts[nb]`` the chunk's end), at most ``size`` (16
    or 32) long; NaN and Inf left out unless the chunk is all ``finite``."""
    if size == 32:
        if finite:
            _largest_of(values, starts, nb, 32, True, patterns)
        else:
            _largest_of(values, starts, nb, 32, False, patterns)
    elif finite:
        _largest_of(values, starts, nb, 16, True, patterns)
    else:
        _largest_of(values, starts, nb, 16, False, patterns)


@numba.njit(nogil=True, inline="always")
def _mx_of(values, starts, nb, finite, inverses, units, element, pad):
    errors = _lanes.accumulator(32)
    under = over = padding = 0
    for k in range(nb):
        start, length = starts[k], starts[k + 1] - starts[k]
        if length == 32:
            u, o = _mx_block(values, start, 32, finite, inverses[k], units[k], element, errors)
        else:
            block = _padded(values, start, length, pad)
            u, o = _mx_block(block, 0, 32, finite, inverses[k], units[k], element, errors)
            padding += 32 - length
        under += u
        over += o
    return under - padding, over, _lanes.accumulated(errors, 32)


@numba.njit(nogil=True)
def mx_values(values, starts, nb, finite, inverses, units, format_row, pad):
    """(underflow + values read as 0, overflow, sum of squared errors in the sums' units) of
    MX blocks of float32 ``values`` (``starts`` as for ``largest_magnitudes``) whose scales
    ``_block_scales.mx_scales`` gave."""
    _, _, emax, emin, mant_bits, max_mantissa, _, _ = format_row
    constants = element(mant_bits, emin, max_mantissa, emax)
    if finite:
        return _mx_of(values, starts, nb, True, inverses, units, constants, pad)
    return _mx_of(values, starts, nb, False, inverses, units, constants, pad)


@numba.njit(nogil=True, inline="always")
def _nvfp4_of(values, starts, nb, finite, reciprocals, scales, tensor_scale, pad):
    errors = _lanes.accumulator(16)
    under = over = padding = 0
    for k in range(nb):
        start, length = starts[k], starts[k + 1] - starts[k]
        if length == 16:
            block, at = values, start
        else:
            block, at = _padded(values, start, length, pad), 0
            padding += 16 - length
        u, o = _nvfp4_block(block, at, 16, finite, reciprocals[k], scales[k], tensor_scale, errors)
        under += u
        over += o
    return under - padding, over, _lanes.accumulated(errors, 16)


@numba.njit(nogil=True)
def nvfp4_values(values, starts, nb, finite, reciprocals, scales, tensor_scale, pad):
    """``mx_values`` for nvfp4 blocks (``_block_scales.nvfp4_scales``); the sum is of the
    raw errors' squares."""
    if finite:
        return _nvfp4_of(values, starts, nb, True, reciprocals, scales, tensor_scale, pad)
    return _nvfp4_of(values, starts, nb, False, reciprocals, scales, tensor_scale, pad)
