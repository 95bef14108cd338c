"""Explicit vector operations for the compiled kernels (numba intrinsics that emit LLVM
vector instructions).

A block of consecutive values is loaded, computed on and reduced as one LLVM vector of
``lanes`` elements (a literal: 16 or 32), which LLVM splits into the CPU's vector registers
(two 512-bit registers for 32 float32 with AVX-512, four with AVX2, eight on NEON).
numba's own loops over a block of 16 or 32 values are unrolled before LLVM's vectoriser sees
them and come out as scalar code; a loop over the blocks that calls these keeps its
accumulators in vector registers (``accumulator``: a vector in the caller's frame, which
LLVM promotes to registers once the calls are inlined) and reduces them once at the end.

Only plain IEEE arithmetic is emitted (no fast-math flags, ``fmuladd`` where fused or not
gives the same or an equally acceptable result), so every operation is exact where the
callers' comments say it is.
"""

from __future__ import annotations

import sys

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_I32 = ir.IntType(32)


def vector_of(element: ir.Type, lanes: int) -> ir.VectorType:
    return ir.VectorType(element, lanes)


def splat(builder: ir.IRBuilder, vector: ir.VectorType, value: ir.Value) -> ir.Value:
    """``value`` in every lane."""
    first = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(_I32, 0))
    lanes = ir.Constant(vector_of(_I32, vector.count), [0] * vector.count)
    return builder.shuffle_vector(first, ir.Constant(vector, ir.Undefined), lanes)


def constant(vector: ir.VectorType, value: float | int) -> ir.Constant:
    return ir.Constant(vector, [value] * vector.count)


def llvm_function(
    builder: ir.IRBuilder, name: str, result: ir.Type, arguments: list
) -> ir.Function:
    """The LLVM intrinsic or function ``name``, declared in the module being built."""
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(result, arguments), name)


def load(context, builder, array_type, array, start, lanes: int) -> ir.Value:
    """``array[start:start + lanes]`` as one vector (unaligned load)."""
    data = context.make_array(array_type)(context, builder, array).data
    vector = vector_of(context.get_value_type(array_type.dtype), lanes)
    pointer = builder.bitcast(builder.gep(data, [start]), vector.as_pointer())
    return builder.load(pointer, align=array_type.dtype.bitwidth // 8)


def load_float32(context, builder, array_type, array, start, lanes: int) -> tuple:
    """(vector, order): ``array[start:start + lanes]`` as float32 lanes, lane p holding the
    value ``order[p]`` of the slice. float32 values load in order. bfloat16, given as its
    uint16 bit patterns (the top half of the float32 of the same value), loads as 32-bit
    pairs: the pairs' high halves, their low halves masked off, are the float32s of one
    value of each pair, their low halves shifted up those of the other. That is one
    integer operation a value in the registers (zero-extending and shifting each value
    takes two), and no widened copy is written to memory and read again."""
    if array_type.dtype != types.uint16:
        return load(context, builder, array_type, array, start, lanes), list(range(lanes))
    data = context.make_array(array_type)(context, builder, array).data
    pairs = vector_of(_I32, lanes // 2)
    words = builder.load(builder.bitcast(builder.gep(data, [start]), pairs.as_pointer()), align=2)
    low = builder.shl(words, constant(pairs, 16))
    high = builder.and_(words, constant(pairs, -(1 << 16)))
    both = builder.shuffle_vector(
        low, high, ir.Constant(vector_of(_I32, lanes), list(range(lanes)))
    )
    low_first = sys.byteorder == "little"  # the pair's first value in its low half
    order = [2 * p + (not low_first) for p in range(lanes // 2)]
    order += [2 * p + low_first for p in range(lanes // 2)]
    return builder.bitcast(both, vector_of(ir.FloatType(), lanes)), order


def larger(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """The lanewise larger of two float vectors without NaN (one ``max`` instruction)."""
    return builder.select(builder.fcmp_ordered(">", a, b), a, b)


def smaller(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """The lanewise smaller of two float vectors without NaN (one ``min`` instruction)."""
    return builder.select(builder.fcmp_ordered("<", a, b), a, b)


def count_true(builder: ir.IRBuilder, mask: ir.Value) -> ir.Value:
    """The number of true lanes of a comparison's ``<lanes x i1>``, as an int64."""
    width = ir.IntType(mask.type.count)
    ones = builder.call(llvm_function(builder, f"llvm.ctpop.i{width.width}", width, [width]),
                        [builder.bitcast(mask, width)])  # fmt: skip
    return builder.zext(ones, ir.IntType(64))


def magnitude_patterns(builder: ir.IRBuilder, floats: ir.Value, finite: bool) -> ir.Value:
    """The bit patterns of |x| of a float32 vector (``<lanes x i32>``), NaN and Inf read as 0
    unless the values are known ``finite``."""
    patterns = vector_of(_I32, floats.type.count)
    magnitude = builder.and_(builder.bitcast(floats, patterns), constant(patterns, 0x7FFFFFFF))
    if finite:
        return magnitude
    below_inf = builder.icmp_signed("<", magnitude, constant(patterns, 0x7F800000))
    return builder.select(below_inf, magnitude, constant(patterns, 0))


def fmuladd(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """``a * b + c``, fused where the CPU has a fused multiply-add."""
    kind = a.type
    name = f"llvm.fmuladd.v{kind.count}{'f64' if kind.element == ir.DoubleType() else 'f32'}"
    return builder.call(llvm_function(builder, name, kind, [kind, kind, kind]), [a, b, c])


@intrinsic(prefer_literal=True)
def largest_magnitude(typingctx, values, start, lanes, finite):
    """The bit pattern (int32) of the largest |x| of the float32 ``values[start:start +
    lanes]``, NaN and Inf left out unless ``finite`` (a literal) says there are none."""
    count, all_finite = lanes.literal_value, finite.literal_value

    def codegen(context, builder, signature, args):
        floats = load(context, builder, signature.args[0], args[0], args[1], count)
        patterns = magnitude_patterns(builder, floats, all_finite)
        vector = vector_of(_I32, count)
        reduce = llvm_function(builder, f"llvm.vector.reduce.smax.v{count}i32", _I32, [vector])
        return builder.call(reduce, [patterns])

    return types.int32(values, start, lanes, finite), codegen


#: Blocks whose largest magnitudes ``group_largest_magnitudes`` finds in one call.
GROUP = 16


def _halves_interleaved(blocks: int, width: int) -> tuple[list[int], list[int]]:
    """Shuffle masks that pair two vectors of ``blocks`` blocks of ``width`` lanes each into
    one of ``2 * blocks`` blocks of ``width / 2`` lanes: the first halves (first mask) and
    the second halves (second mask) of each block, the first vector's blocks first."""
    half = width // 2
    first, second = [], []
    for block in range(2 * blocks):
        source, own = (0, block) if block < blocks else (GROUP, block - blocks)
        first += [source + own * width + p for p in range(half)]
        second += [source + own * width + half + p for p in range(half)]
    return first, second


@intrinsic(prefer_literal=True)
def group_largest_magnitudes(typingctx, values, start, lanes, finite, patterns, at):
    """``patterns[at:at + GROUP]``: the bit patterns of the largest |x| of ``GROUP``
    consecutive blocks of ``lanes`` float32 values from ``values[start]`` (NaN and Inf left
    out unless ``finite``). Each block is reduced to 16 lanes, then the 16 vectors in
    pairs, halving the lanes per block and doubling the blocks per vector, to one vector
    of the 16 maxima: 45 shuffles and maxima instead of a reduction tree per block."""
    count, all_finite = lanes.literal_value, finite.literal_value

    def codegen(context, builder, signature, args):
        patterns_type = vector_of(_I32, GROUP)
        maximum = llvm_function(
            builder, f"llvm.smax.v{GROUP}i32", patterns_type, [patterns_type, patterns_type]
        )
        vectors = []
        for block in range(GROUP):
            offset = builder.add(args[1], ir.Constant(args[1].type, block * count))
            floats = load(context, builder, signature.args[0], args[0], offset, count)
            magnitudes = magnitude_patterns(builder, floats, all_finite)
            if count > GROUP:  # the two halves' larger lanes
                lo, hi = (
                    builder.shuffle_vector(
                        magnitudes,
                        magnitudes,
                        ir.Constant(patterns_type, list(range(h, h + GROUP))),
                    )
                    for h in (0, GROUP)
                )
                magnitudes = builder.call(maximum, [lo, hi])
            vectors.append(magnitudes)
        blocks, width = 1, GROUP
        while width > 1:
            first, second = _halves_interleaved(blocks, width)
            masks = [ir.Constant(patterns_type, m) for m in (first, second)]
            vectors = [
                builder.call(maximum, [builder.shuffle_vector(x, y, mask) for mask in masks])
                for x, y in zip(vectors[::2], vectors[1::2])
            ]
            blocks, width = 2 * blocks, width // 2
        pointer = builder.bitcast(
            builder.gep(context.make_array(signature.args[4])(context, builder, args[4]).data,
                        [args[5]]),
            patterns_type.as_pointer(),
        )  # fmt: skip
        builder.store(vectors[0], pointer, align=4)
        return context.get_dummy_value()

    return types.none(values, start, lanes, finite, patterns, at), codegen


@intrinsic(prefer_literal=True)
def accumulator(typingctx, lanes):
    """A zeroed vector of ``lanes`` float64 in the caller's frame, as a pointer: the loop
    that adds to it keeps it in registers."""
    count = lanes.literal_value

    def codegen(context, builder, signature, args):
        vector = vector_of(ir.DoubleType(), count)
        slot = cgutils.alloca_once(builder, vector)
        builder.store(constant(vector, 0.0), slot)
        return builder.bitcast(slot, ir.DoubleType().as_pointer())

    return types.CPointer(types.float64)(lanes), codegen


@intrinsic(prefer_literal=True)
def accumulated(typingctx, pointer, lanes):
    """The sum of the ``lanes`` float64 of an ``accumulator``, in any order."""
    count = lanes.literal_value

    def codegen(context, builder, signature, args):
        vector = vector_of(ir.DoubleType(), count)
        lanes_ = builder.load(builder.bitcast(args[0], vector.as_pointer()))
        reduce = llvm_function(
            builder, f"llvm.vector.reduce.fadd.v{count}f64", ir.DoubleType(),
            [ir.DoubleType(), vector],
        )  # fmt: skip
        return builder.call(reduce, [ir.Constant(ir.DoubleType(), 0.0), lanes_],
                            fastmath=("reassoc",))  # fmt: skip

    return types.float64(pointer, lanes), codegen
