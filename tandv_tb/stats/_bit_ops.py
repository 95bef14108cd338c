"""Integer operations for the compiled kernels that stay in their operands' width, and bit
casts between floats and integers.

numba widens integer arithmetic narrower than 64 bits to 64 bits, which halves the vector
lanes and keeps min/max from vectorising; these intrinsics give the LLVM operation in the
operands' own width instead.
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic


def _same_width(operation):
    """An intrinsic ``f(a, b)`` of two integers of one type that gives
    ``operation(builder, a, b)`` (LLVM IR) in their own width: numba widens narrow integer
    arithmetic to 64 bits, which halves the vector lanes and keeps min/max from
    vectorising."""

    @intrinsic
    def same_width(typingctx, a, b):
        def codegen(context, builder, signature, args):
            return operation(builder, *args)

        return a(a, a), codegen

    return same_width


_same_width_and = _same_width(lambda ir, a, b: ir.and_(a, b))
_same_width_add = _same_width(lambda ir, a, b: ir.add(a, b))  # wrapping
_same_width_max = _same_width(lambda ir, a, b: ir.select(ir.icmp_signed(">", a, b), a, b))
_same_width_min = _same_width(lambda ir, a, b: ir.select(ir.icmp_signed("<", a, b), a, b))
#: 1 where ``a <= b``, else 0.
_same_width_at_most = _same_width(lambda ir, a, b: ir.zext(ir.icmp_signed("<=", a, b), a.type))
_same_width_sub = _same_width(lambda ir, a, b: ir.sub(a, b))  # wrapping
#: ``a`` where ``a < b``, else 0.
_same_width_below = _same_width(
    lambda ir, a, b: ir.select(ir.icmp_signed("<", a, b), a, ir.sub(a, a))
)


@intrinsic
def bits64(typingctx, value):
    """The bit pattern of a float64 as an int64."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))

    return types.int64(types.float64), codegen


@intrinsic
def float64_of(typingctx, pattern):
    """The float64 of an int64 bit pattern."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return types.float64(types.int64), codegen


@intrinsic
def bits32(typingctx, value):
    """The bit pattern of a float32 as an int32."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int32))

    return types.int32(types.float32), codegen


@intrinsic
def float32_of(typingctx, pattern):
    """The float32 of an integer bit pattern (a wider integer is truncated to 32 bits)."""

    def codegen(context, builder, signature, args):
        value = args[0]
        if value.type.width > 32:
            value = builder.trunc(value, context.get_value_type(types.int32))
        return builder.bitcast(value, context.get_value_type(types.float32))

    return types.float32(pattern), codegen
