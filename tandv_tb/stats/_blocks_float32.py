"""Block formats over a chunk of float32 values in vector lanes: each block's largest
magnitude, then (with its scale, ``_block_scales``) its values' underflow, overflow and
squared errors, one MX block of 32 values or a run of four nvfp4 blocks of 16 a vector
(``_lanes``).

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
from numba.extending import intrinsic, overload

from tandv_tb.formats.blocks import (
    MX_BLOCK,
    MX_SCALE_MAX,
    MX_SCALE_MIN,
    NVFP4_BLOCK,
    NVFP4_EMAX,
    NVFP4_EMIN,
    NVFP4_MANTISSA_BITS,
    NVFP4_MAX_MANTISSA,
    NVFP4_SCALE_MAX,
)
from tandv_tb.stats import _lanes
from tandv_tb.stats._bit_ops import bits32, float32_of
from tandv_tb.stats._block_scales import (
    CLAMPED_HIGH,
    CLAMPED_LOW,
    SCALES,
    ZERO_BLOCKS,
    mx_carry,
    mx_scale_of_pattern,
)

_F32, _F64, _I32 = ir.FloatType(), ir.DoubleType(), ir.IntType(32)
_FLOAT32_LARGEST = np.float32(np.finfo(np.float32).max)
#: Whole blocks taken per step of the value loops where they follow each other.
_RUN = 4
#: The lanes of a run of nvfp4 blocks, taken as one vector (measured: 10% faster than one
#: block a vector; eight blocks a run spill registers).
_RUN_LANES = NVFP4_BLOCK * _RUN
#: E4M3's largest value, the only nvfp4 block scale under which a value can saturate.
_E4M3_LARGEST = np.float32(NVFP4_SCALE_MAX)


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
#: nvfp4's element (E2M1) as ``_element`` describes it.
_E2M1 = _element(NVFP4_MANTISSA_BITS, NVFP4_EMIN, NVFP4_MAX_MANTISSA, NVFP4_EMAX)


def _rounded(builder, v, element, saturating=True):
    """(q, saturated, underflowed) of the float32 vector ``v >= 0`` rounded to the element
    format that ``element`` (``_element``'s tuple) describes; where the caller knows that
    no value of the block rounds past the largest (not ``saturating``), ``saturated`` is
    None and no lane is compared with it."""
    floats, patterns = v.type, _lanes.vector_of(_I32, v.type.count)
    per_binade, smallest, largest, underflow_at = (
        _lanes.splat(builder, floats, builder.extract_value(element, k)) for k in range(4)
    )
    binade = builder.and_(builder.bitcast(v, patterns), _lanes.constant(patterns, 0x7F800000))
    c = _lanes.larger(builder, builder.fmul(builder.bitcast(binade, floats), per_binade), smallest)
    r = builder.fsub(builder.fadd(v, c), c)
    underflowed = builder.fcmp_ordered("<=", v, underflow_at)
    if not saturating:
        return r, None, underflowed
    saturated = builder.fcmp_ordered(">", r, largest)
    return _lanes.smaller(builder, r, largest), saturated, underflowed


def _square_into(builder, errors, d):
    """Adds the squares of the float64 vector ``d`` to the accumulator ``errors``."""
    pointer = builder.bitcast(errors, d.type.as_pointer())
    builder.store(_lanes.fmuladd(builder, d, d, builder.load(pointer)), pointer)


def _counts(context, builder, saturated, underflowed):
    pair = types.UniTuple(types.int64, 2)
    over = (
        ir.Constant(ir.IntType(64), 0)
        if saturated is None
        else _lanes.count_true(builder, saturated)
    )
    return context.make_tuple(builder, pair, [_lanes.count_true(builder, underflowed), over])


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


def _per_block(builder, vector, order):
    """``<blocks x float>`` widened to a lane per value, each block's value in the lanes of
    its 16 values (lane p holds value ``order[p]``, ``_lanes.load_float32``)."""
    mask = ir.Constant(_lanes.vector_of(_I32, len(order)), [i // NVFP4_BLOCK for i in order])
    return builder.shuffle_vector(vector, ir.Constant(vector.type, ir.Undefined), mask)


@intrinsic(prefer_literal=True)
def _nvfp4_blocks(
    typingctx, values, start, blocks, finite, saturating, reciprocals, scales, at,
    tensor_scale, errors,
):  # fmt: skip
    """(underflow, overflow) of ``blocks`` consecutive nvfp4 blocks of 16 values from
    ``values[start]`` (one vector of ``16 * blocks`` lanes), whose reciprocals and E4M3
    scales are ``reciprocals[at:at + blocks]`` and ``scales[at:at + blocks]``; the squares
    of their raw errors added to ``errors`` (an accumulator of as many lanes). Only a block
    whose scale was clamped high (``saturating``) can have a value past 6: elsewhere its
    largest value times the reciprocal is at most ``6 * raw / scale``, below 6.5 (E4M3
    rounds ``raw`` by at most 1/16). Where the blocks are all ``finite`` and none saturates,
    the values keep their signs (rounding to nearest even is symmetric, the squares do not
    see the sign, and a value underflows where it rounds to 0): no masking, and the
    float64 widening reads the values as they are."""
    n_blocks, all_finite, may_saturate = (
        blocks.literal_value,
        finite.literal_value,
        saturating.literal_value,
    )
    count = NVFP4_BLOCK * n_blocks
    signed = all_finite and not may_saturate

    def codegen(context, builder, signature, args):
        floats, doubles = _lanes.vector_of(_F32, count), _lanes.vector_of(_F64, count)
        x, order = _lanes.load_float32(context, builder, signature.args[0], args[0], args[1], count)
        if signed:
            a = x
        else:
            a = builder.bitcast(_lanes.magnitude_patterns(builder, x, all_finite), floats)
        reciprocal, scale = (
            _per_block(
                builder,
                _lanes.load(context, builder, signature.args[k], args[k], args[7], n_blocks),
                order,
            )
            for k in (5, 6)
        )
        v = builder.fmul(a, reciprocal)
        e2m1 = context.make_tuple(
            builder, types.UniTuple(types.float32, 4),
            [ir.Constant(_F32, float(c)) for c in _E2M1],
        )  # fmt: skip
        q, saturated, underflowed = _rounded(builder, v, e2m1, may_saturate)
        if signed:
            underflowed = builder.fcmp_ordered("==", q, _lanes.constant(floats, 0.0))
        scaled = builder.fpext(builder.fmul(q, scale), doubles)
        minus_tensor_scale = _lanes.splat(builder, doubles, builder.fneg(args[8]))
        d = _lanes.fmuladd(builder, scaled, minus_tensor_scale, builder.fpext(a, doubles))
        _square_into(builder, args[9], d)
        return _counts(context, builder, saturated, underflowed)

    pair = types.UniTuple(types.int64, 2)
    arguments = (
        values, start, blocks, finite, saturating, reciprocals, scales, at, tensor_scale, errors
    )  # fmt: skip
    return pair(*arguments), codegen


def _float32_at(values, i):
    """``values[i]`` as a float32, bfloat16 given as its uint16 bit pattern."""


@overload(_float32_at, inline="always")
def _float32_at_overload(values, i):
    if values.dtype == types.uint16:
        return lambda values, i: float32_of(np.int64(values[i]) << 16)
    return lambda values, i: values[i]


@numba.njit(nogil=True, inline="always")
def _pad(values, start, length, pad):
    """A short block copied to the front of ``pad`` as float32, zeros after it."""
    for i in range(length):
        pad[i] = _float32_at(values, start + i)
    for i in range(length, len(pad)):
        pad[i] = 0.0


@numba.njit(nogil=True, inline="always")
def _largest_of(values, starts, nb, size, finite, patterns):
    k = 0
    while k < nb:
        start, length = starts[k], starts[k + 1] - starts[k]
        if k + _lanes.GROUP <= nb and starts[k + _lanes.GROUP] - start == _lanes.GROUP * size:
            _lanes.group_largest_magnitudes(values, start, size, finite, patterns, k)
            k += _lanes.GROUP
            continue
        if length == size:
            patterns[k] = _lanes.largest_magnitude(values, start, size, finite)
        else:
            largest = np.int32(0)
            for i in range(start, start + length):
                a = abs(values[i])
                largest = max(largest, bits32(a) if a <= _FLOAT32_LARGEST else np.int32(0))
            patterns[k] = largest
        k += 1


@numba.njit(nogil=True)
def largest_magnitudes(values, starts, nb, size, finite, patterns):
    """``patterns[k]``: the bit pattern of block k's largest finite |x| (0 for none), the
    blocks starting at ``starts[k]`` (``starts[nb]`` the chunk's end), at most ``size`` (16
    or 32) long; NaN and Inf left out unless the chunk is all ``finite``."""
    if size == MX_BLOCK:
        if finite:
            _largest_of(values, starts, nb, MX_BLOCK, True, patterns)
        else:
            _largest_of(values, starts, nb, MX_BLOCK, False, patterns)
    elif finite:
        _largest_of(values, starts, nb, NVFP4_BLOCK, True, patterns)
    else:
        _largest_of(values, starts, nb, NVFP4_BLOCK, False, patterns)


@numba.njit(nogil=True, inline="always")
def _mx_scaled_block(values, start, finite, pattern, scaling, constants, row, errors):
    """``_mx_block`` of one block whose largest |x| is ``pattern``, its scale counted in
    ``row`` (``scaling``: ``mx_carry``, bias, the units' bias, the lowest scale); (under,
    over, zero block, clamped low, clamped high)."""
    carry, bias, unit_bias, scale_lo = scaling
    raw, scale = mx_scale_of_pattern(pattern, carry, bias)
    live = pattern != 0
    row[SCALES + scale - scale_lo] += live
    inverse = float32_of((np.int32(127) - scale) << 23)
    unit = float32_of(max(scale + unit_bias, np.int32(0)) << 23)
    u, o = _mx_block(values, start, MX_BLOCK, finite, inverse, unit, constants, errors)
    low, high = live & (raw < MX_SCALE_MIN), live & (raw > MX_SCALE_MAX)
    return u, o, np.int64(not live), np.int64(low), np.int64(high)


@numba.njit(nogil=True, inline="always")
def _plus(a, b):
    return a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4]


@numba.njit(nogil=True, inline="always")
def _mx_of(values, starts, nb, finite, patterns, format_row, exponent, row, pad):
    rule, _, emax, emin, mant_bits, max_mantissa, scale_lo, _ = format_row
    constants = element(mant_bits, emin, max_mantissa, emax)
    carry = mx_carry(rule, mant_bits, max_mantissa)
    scaling = (carry, np.int32(127 + emax), np.int32(127 - exponent), scale_lo)
    errors = _lanes.accumulator(MX_BLOCK)
    counts = (0, 0, 0, 0, 0)  # under, over, zero blocks, clamped low, clamped high
    padding = 0
    for k in range(nb):
        start, length = starts[k], starts[k + 1] - starts[k]
        if length == MX_BLOCK:
            block = _mx_scaled_block(
                values, start, finite, patterns[k], scaling, constants, row, errors
            )
        else:
            _pad(values, start, length, pad)
            block = _mx_scaled_block(pad, 0, finite, patterns[k], scaling, constants, row, errors)
            padding += MX_BLOCK - length
        counts = _plus(counts, block)
    row[ZERO_BLOCKS] += counts[2]
    row[CLAMPED_LOW] += counts[3]
    row[CLAMPED_HIGH] += counts[4]
    return counts[0] - padding, counts[1], _lanes.accumulated(errors, MX_BLOCK)


@numba.njit(nogil=True)
def mx_values(values, starts, nb, finite, patterns, format_row, exponent, row, pad):
    """(underflow + values read as 0, overflow, sum of squared errors in units of
    ``4**exponent``) of MX blocks of float32 ``values`` (``starts`` as for
    ``largest_magnitudes``, ``patterns`` what it found), whose scales
    (``_block_scales.mx_scale_of_pattern``) are counted in ``row`` on the way: an integer
    step per block beside the vector work."""
    if finite:
        return _mx_of(values, starts, nb, True, patterns, format_row, exponent, row, pad)
    return _mx_of(values, starts, nb, False, patterns, format_row, exponent, row, pad)


@numba.njit(nogil=True, inline="always")
def _nvfp4_of(values, starts, nb, finite, patterns, blocks, tensor_scale, row, pad):
    reciprocals, scales, exponents, scale_lo = blocks
    run_errors, errors = _lanes.accumulator(_RUN_LANES), _lanes.accumulator(NVFP4_BLOCK)
    under = over = padding = 0
    k = 0
    while k < nb:
        start, length = starts[k], starts[k + 1] - starts[k]
        if k + _RUN <= nb and starts[k + _RUN] - start == _RUN * NVFP4_BLOCK:
            # A run of whole blocks in one vector, saturating only where one of their
            # scales is E4M3's largest (clamped high, or rounded up to it).
            largest = scales[k]
            for j in range(_RUN):
                row[SCALES + exponents[k + j] - scale_lo] += patterns[k + j] != 0
                largest = max(largest, scales[k + j])
            if largest < _E4M3_LARGEST:
                u, o = _nvfp4_blocks(
                    values, start, _RUN, finite, False, reciprocals, scales, k, tensor_scale,
                    run_errors,
                )  # fmt: skip
            else:
                u, o = _nvfp4_blocks(
                    values, start, _RUN, finite, True, reciprocals, scales, k, tensor_scale,
                    run_errors,
                )  # fmt: skip
            k += _RUN
        else:
            # One block, whole or short (padded with zeros), in the saturating form.
            row[SCALES + exponents[k] - scale_lo] += patterns[k] != 0
            if length == NVFP4_BLOCK:
                u, o = _nvfp4_blocks(
                    values, start, 1, finite, True, reciprocals, scales, k, tensor_scale, errors
                )
            else:
                _pad(values, start, length, pad)
                padding += NVFP4_BLOCK - length
                u, o = _nvfp4_blocks(
                    pad, 0, 1, finite, True, reciprocals, scales, k, tensor_scale, errors
                )
            k += 1
        under += u
        over += o
    raw = _lanes.accumulated(run_errors, _RUN_LANES) + _lanes.accumulated(errors, NVFP4_BLOCK)
    return under - padding, over, raw


@numba.njit(nogil=True)
def nvfp4_values(values, starts, nb, finite, patterns, blocks, tensor_scale, row, pad):
    """``mx_values`` for nvfp4 blocks, ``blocks`` being what ``_block_scales.nvfp4_scales``
    found (reciprocals, E4M3 scales, their exponents) and the lowest scale exponent; the
    scales are counted in ``row`` on the way; the sum is of the raw errors' squares.
    ``values`` may also be bfloat16 given as uint16 bit patterns, widened as they are read
    (``_lanes.load_float32``)."""
    if finite:
        return _nvfp4_of(values, starts, nb, True, patterns, blocks, tensor_scale, row, pad)
    return _nvfp4_of(values, starts, nb, False, patterns, blocks, tensor_scale, row, pad)
