"""The CPU kernel's block-scaled formats (``tandv_tb.formats.blocks``): what ``_cpu_kernel``
calls on one cached chunk of values, and which path takes it.

Chunks begin and end on block boundaries (``_cpu_kernel`` sees to it). A chunk is cut into
its blocks (``cut``: whole blocks of 16 or 32 consecutive values, a shorter one at the end
of a row whose length is not a multiple), the blocks' largest finite magnitudes found once
per block size, and for each format its blocks' scales counted (``_block_scales``) and its
values' underflow, overflow and squared errors added up (``add_chunk``) by one of three
exact paths:

- float32 chunks (every dtype but float64): in float32 vector lanes (``_blocks_float32``),
  unless the chunk holds subnormals and the CPU reads subnormal operands as 0 (XLA's
  threads, ``torch.set_flush_denormal``), or nvfp4's per-tensor scale is tiny: then in
  integers on the bit patterns (``_blocks_exact``);
- float64 arrays: in float64 from their exact magnitudes (``_blocks_float64``).

A format's counts are a flat int64 row (``_block_scales.UNDER`` ...); its sum: the squares
of the errors, in units of ``4**exponent`` (``exponent`` the same for all formats). The
signal, the squares of the values, is the moments' sum that ``_cpu_kernel`` keeps anyway.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.extending import overload

from tandv_tb.formats.blocks import LARGEST_BLOCK, MX_BLOCK, NVFP4, NVFP4_BLOCK, SMALLEST_BLOCK
from tandv_tb.stats import _block_scales, _blocks_exact, _blocks_float32, _blocks_float64
from tandv_tb.stats._block_scales import OVER, UNDER

#: The sums' exponent before any finite non-zero value is seen.
NO_UNITS = -(1 << 20)
#: Which formats ``add_chunk`` takes: all, all but nvfp4, or only nvfp4 (whose per-tensor
#: scale needs the tensor's largest magnitude: when it is not known before the values are
#: read, nvfp4 waits for a second sweep).
ALL, BUT_NVFP4, ONLY_NVFP4 = 0, 1, 2
_TINY = float(np.finfo(np.float32).smallest_subnormal)


@numba.njit(nogil=True)
def new_scratch(size, row_length, widest, wide):
    """The buffers of ``add_chunk`` for chunks of up to ``size`` values along rows of
    ``row_length``, formats of up to ``widest`` scale exponents, float64 values if
    ``wide``. (The integer path's per-value buffers are made when a chunk needs them.)"""
    blocks = size // SMALLEST_BLOCK + size // row_length + 2  # a row adds at most one short block
    wide_size = size if wide else 0
    return (
        (np.empty(blocks + 1, np.int64), np.empty(blocks + 1, np.int64)),  # starts: 32, 16
        (np.empty(blocks, np.int32), np.empty(blocks, np.int32)),  # largest patterns
        np.empty(blocks, np.int32),  # per block: scale exponent
        np.empty(blocks, np.float32),  # nvfp4: reciprocal
        np.empty(blocks, np.float32),  # nvfp4: E4M3 scale
        np.empty(blocks),  # nvfp4 (integer path): dequantization factor
        np.zeros((4, max(widest, 1)), np.int64),  # scale counts, four tables
        np.empty(LARGEST_BLOCK, np.float32),  # a short block, padded
        np.array([_TINY], np.float32),  # read as 0 where subnormal operands are
        (np.empty(wide_size), np.empty(wide_size), np.empty(wide_size), np.empty(wide_size)),
    )


@numba.njit(nogil=True)
def cut(n, offset, row_length, size, starts):
    """The number of blocks of ``size`` in a chunk of ``n`` values whose first value lies
    ``offset`` values (a multiple of ``size``) into its row of ``row_length``; block k
    starts at ``starts[k]``, and ``starts[nb]`` is ``n``."""
    if row_length % size == 0:
        nb = (n + size - 1) // size
        for k in range(nb):
            starts[k] = k * size
    else:
        nb, lo, position = 0, 0, offset
        while lo < n:
            starts[nb] = lo
            lo = min(lo + size, lo + row_length - position, n)
            position = (offset + lo) % row_length
            nb += 1
    starts[nb] = n
    return nb


@numba.njit(nogil=True)
def _taken(rule, which):
    """Whether ``add_chunk`` takes a format of scale rule ``rule``."""
    return which == ALL or (rule == NVFP4) == (which == ONLY_NVFP4)


@numba.njit(nogil=True)
def _cut_both(n, offset, row_length, table, which, starts):
    """``cut`` for the block sizes of the formats of ``table`` taken (32 and 16; -1 where
    none has it)."""
    nb = np.array([-1, -1])
    for f in range(table.shape[0]):
        size = 0 if table[f, 1] == MX_BLOCK else 1
        if nb[size] < 0 and _taken(table[f, 0], which):
            nb[size] = cut(n, offset, row_length, table[f, 1], starts[size])
    return nb


@numba.njit(nogil=True, inline="always")
def _chunk_units(largest, mant_bits, bias, sums, units):
    """(exponent, to_units) of one chunk's sums of squared errors. The exponent is
    floor(log2) of its largest finite |x| (whose bit pattern is ``largest``; a subnormal
    one taken as the smallest normal), within -1022 .. 1022 so that its powers of two stay
    normal float64s. The running ``sums`` move to it (exact powers of two) where it is
    above their exponent ``units[0]``; ``to_units`` takes the chunk's sums to
    ``units[0]``. A chunk with no finite non-zero value has only exact zero errors: unit
    1, and nothing joins the sums (its factor would overflow)."""
    if largest <= 0:
        return 0, 0.0
    exponent = min(max((largest >> mant_bits) - bias, 1 - bias), 1022)
    if exponent > units[0]:
        sums *= math.ldexp(1.0, 2 * int(max(units[0] - exponent, -2100)))
        units[0] = exponent
    return exponent, math.ldexp(1.0, 2 * int(exponent - units[0]))


def add_chunk(
    values, bits, largest, sign_mask, inf_bits, subnormals, read_as_zero, finite, offset,
    row_length, table, tensor_scale, which, rows, sums, units, scratch, maxima,
):  # fmt: skip
    """Adds the block formats' counts (``rows[f]``) and sums of squared errors (``sums[f]``,
    in units of ``4**units[0]``) of one chunk of float32 or float64 ``values`` (``bits``
    their integer patterns, read through ``sign_mask`` and ``inf_bits``; ``largest``,
    ``subnormals``, ``read_as_zero`` (zeros, NaN and Inf) and whether all are ``finite``
    found by the kernel), whose first value lies ``offset`` values into its row of
    ``row_length``; ``table`` describes the formats (``BlockFormat.kernel_row``),
    ``tensor_scale`` is nvfp4's per-tensor scale, ``which`` the formats to take (``ALL``,
    ``BUT_NVFP4``, ``ONLY_NVFP4``). Where nvfp4 waits for the second sweep, the first
    (``BUT_NVFP4``) puts the largest finite magnitudes of the chunk's blocks of 16 into
    ``maxima`` while the chunk is in the cache, and the second (``ONLY_NVFP4``) reads them
    there: float32 chunks only (float64 ones find theirs in the second sweep; ``maxima``
    may then be empty). Returns how many blocks' maxima it put there. Compiled for the
    values' type only; bfloat16 given as uint16 bit patterns only in the second sweep."""


@overload(add_chunk, jit_options={"nogil": True, "error_model": "numpy"})
def _add_chunk(
    values, bits, largest, sign_mask, inf_bits, subnormals, read_as_zero, finite, offset,
    row_length, table, tensor_scale, which, rows, sums, units, scratch, maxima,
):  # fmt: skip
    if values.dtype == types.float32:
        return _add_chunk_float32
    if values.dtype == types.uint16:
        return _add_chunk_bfloat16
    return _add_chunk_float64


def _add_chunk_float32(
    values, bits, largest, sign_mask, inf_bits, subnormals, read_as_zero, finite, offset,
    row_length, table, tensor_scale, which, rows, sums, units, scratch, maxima,
):  # fmt: skip
    starts, patterns, exponents, first, second, dequanta, tables, pad, probe = scratch[:9]
    exponent, to_units = _chunk_units(largest, 23, 127, sums, units)
    flushed = subnormals > 0 and probe[0] == 0.0  # subnormal operands read as 0
    nb = _cut_both(len(values), offset, row_length, table, which, starts)
    if nb[0] >= 0:
        _blocks_float32.largest_magnitudes(values, starts[0], nb[0], MX_BLOCK, finite, patterns[0])
    kept = 0
    if which == BUT_NVFP4 and len(maxima):  # for the second sweep
        kept = cut(len(values), offset, row_length, NVFP4_BLOCK, starts[1])
        _blocks_float32.largest_magnitudes(values, starts[1], kept, NVFP4_BLOCK, finite, maxima)
    elif which == ALL and nb[1] >= 0:
        _blocks_float32.largest_magnitudes(
            values, starts[1], nb[1], NVFP4_BLOCK, finite, patterns[1]
        )
    for f in range(table.shape[0]):
        rule, size, _, _, _, _, scale_lo, _ = table[f]
        if not _taken(rule, which):
            continue
        s = 0 if size == MX_BLOCK else 1
        block_starts, block_patterns, n_blocks, row = starts[s], patterns[s], nb[s], rows[f]
        if which == ONLY_NVFP4:
            block_patterns = maxima
        if rule == NVFP4 and not flushed and _block_scales.nvfp4_in_lanes(tensor_scale):
            _block_scales.nvfp4_scales(
                block_patterns, n_blocks, tensor_scale, row, exponents, first, second
            )
            under, over, raw = _blocks_float32.nvfp4_values(
                values, block_starts, n_blocks, finite, block_patterns,
                (first, second, exponents, scale_lo), tensor_scale, row, pad,
            )  # fmt: skip
            under -= read_as_zero
            error = raw * math.ldexp(1.0, -2 * exponent)
        elif rule == NVFP4:
            _blocks_exact.nvfp4_scales(
                block_patterns, n_blocks, tensor_scale, scale_lo, row, first, dequanta
            )
            under, over, error = _blocks_exact.nvfp4_values(
                bits, block_starts, n_blocks, first, dequanta, exponent,
                np.empty(len(values), np.float32), np.empty(len(values)),
            )  # fmt: skip
        elif flushed:
            _block_scales.mx_scales(block_patterns, n_blocks, table[f], row, exponents, tables)
            under, over, error = _blocks_exact.mx_values(
                bits, block_starts, n_blocks, exponents, table[f], exponent,
                np.empty(len(values), np.int64), np.empty(len(values), np.float32),
            )  # fmt: skip
        else:
            under, over, error = _blocks_float32.mx_values(
                values, block_starts, n_blocks, finite, block_patterns, table[f], exponent,
                row, pad,
            )  # fmt: skip
            under -= read_as_zero
        row[UNDER] += under
        row[OVER] += over
        sums[f] += error * to_units
    return kept


def _add_chunk_bfloat16(
    values, bits, largest, sign_mask, inf_bits, subnormals, read_as_zero, finite, offset,
    row_length, table, tensor_scale, which, rows, sums, units, scratch, maxima,
):  # fmt: skip
    """nvfp4 in the second sweep (``ONLY_NVFP4``) over bfloat16 ``values`` given as their
    uint16 bit patterns, read in place by the vector lanes (``_lanes.load_float32``):
    widening each chunk into a float32 buffer again cost about 0.1 ns a value. Only the
    integer path widens them, into ``bits``. (The same two paths as
    ``_add_chunk_float32``'s nvfp4; one function shared by both made float32's 0.03 ns a
    value slower.)"""
    starts, _, exponents, first, second, dequanta, _, pad, probe = scratch[:9]
    exponent, to_units = _chunk_units(largest, 23, 127, sums, units)
    flushed = subnormals > 0 and probe[0] == 0.0  # subnormal operands read as 0
    n_blocks = cut(len(values), offset, row_length, NVFP4_BLOCK, starts[1])
    for f in range(table.shape[0]):
        if table[f, 0] != NVFP4:
            continue
        scale_lo, row = table[f, 6], rows[f]
        if not flushed and _block_scales.nvfp4_in_lanes(tensor_scale):
            _block_scales.nvfp4_scales(
                maxima, n_blocks, tensor_scale, row, exponents, first, second
            )
            under, over, raw = _blocks_float32.nvfp4_values(
                values, starts[1], n_blocks, finite, maxima,
                (first, second, exponents, scale_lo), tensor_scale, row, pad,
            )  # fmt: skip
            under -= read_as_zero
            error = raw * math.ldexp(1.0, -2 * exponent)
        else:
            for i in range(len(values)):
                bits[i] = np.int64(values[i]) << 16  # stored truncated to 32 bits
            _blocks_exact.nvfp4_scales(
                maxima, n_blocks, tensor_scale, scale_lo, row, first, dequanta
            )
            under, over, error = _blocks_exact.nvfp4_values(
                bits, starts[1], n_blocks, first, dequanta, exponent,
                np.empty(len(values), np.float32), np.empty(len(values)),
            )  # fmt: skip
        row[UNDER] += under
        row[OVER] += over
        sums[f] += error * to_units
    return 0


def _add_chunk_float64(
    values, bits, largest, sign_mask, inf_bits, subnormals, read_as_zero, finite, offset,
    row_length, table, tensor_scale, which, rows, sums, units, scratch, maxima,
):  # fmt: skip
    starts, buffers = scratch[0], scratch[9]
    exponent, to_units = _chunk_units(largest, 52, 1023, sums, units)
    nb = _cut_both(len(values), offset, row_length, table, which, starts)
    a = buffers[0][: len(values)]
    _blocks_float64.magnitudes(values, bits, sign_mask, inf_bits, a)
    taken = np.array([_taken(table[f, 0], which) for f in range(table.shape[0])])
    _blocks_float64.add_chunk(
        a, starts, nb, table, taken, tensor_scale, exponent, to_units, rows, sums, buffers[1:]
    )
    return 0
