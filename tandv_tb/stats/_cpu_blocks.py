"""The CPU kernel's block-scaled formats (``tandv_tb.block_formats``): what ``_cpu_kernel``
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

from tandv_tb.block_formats import NVFP4
from tandv_tb.stats import _block_scales, _blocks_exact, _blocks_float32, _blocks_float64
from tandv_tb.stats._block_scales import OVER, UNDER

#: Rows of a multiple of this many values hold whole blocks of every format.
_ALIGNED = 32
_TINY = float(np.finfo(np.float32).smallest_subnormal)


@numba.njit(nogil=True)
def new_scratch(size, widest):
    """The buffers of ``add_chunk_float32`` and ``add_chunk_float64`` for chunks of up to
    ``size`` values and formats of up to ``widest`` scale exponents."""
    blocks = size + 1  # rows of one value are blocks of one value
    return (
        (np.empty(blocks, np.int64), np.empty(blocks, np.int64)),  # starts: 32, 16
        (np.empty(blocks, np.int32), np.empty(blocks, np.int32)),  # largest patterns
        np.empty(blocks, np.int32),  # per block: scale exponent
        np.empty(blocks, np.float32),  # inverse (MX) or reciprocal (nvfp4)
        np.empty(blocks, np.float32),  # unit (MX) or E4M3 scale (nvfp4)
        np.empty(blocks),  # dequantization factor (nvfp4, integer path)
        np.zeros((4, max(widest, 1)), np.int64),  # scale counts, four tables
        np.empty(32, np.float32),  # a short block, padded
        np.empty(size, np.int64),  # per value (integer path): scale exponents
        np.empty(size, np.float32),  # reciprocals, errors
        np.empty(size),  # errors
        np.array([_TINY], np.float32),  # read as 0 where subnormal operands are
        (np.empty(size), np.empty(size), np.empty(size), np.empty(size)),  # float64 path
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
def _cut_both(n, offset, row_length, table, starts):
    """``cut`` for the block sizes of ``table`` (32 and 16; -1 where none has it)."""
    nb = np.array([-1, -1])
    for f in range(table.shape[0]):
        which = 0 if table[f, 1] == 32 else 1
        if nb[which] < 0:
            nb[which] = cut(n, offset, row_length, table[f, 1], starts[which])
    return nb


def add_chunk(
    values, bits, sign_mask, inf_bits, subnormals, read_as_zero, finite, offset, row_length,
    table, tensor_scale, exponent, rows, sums, scratch,
):  # fmt: skip
    """Adds the block formats' counts (``rows[f]``) and sums of squared errors (``sums[f]``)
    of one chunk of float32 or float64 ``values`` (``bits`` their integer patterns, read
    through ``sign_mask`` and ``inf_bits``; ``subnormals``, ``read_as_zero`` (zeros, NaN and
    Inf) and whether all are ``finite`` counted by the kernel), whose first value lies
    ``offset`` values into its row of ``row_length``; ``table`` describes the formats
    (``BlockFormat.kernel_row``), ``tensor_scale`` is nvfp4's per-tensor scale,
    ``exponent`` the sums' (``sums_exponent``). Compiled for the values' type only."""


@overload(add_chunk, jit_options={"nogil": True, "error_model": "numpy"})
def _add_chunk(
    values, bits, sign_mask, inf_bits, subnormals, read_as_zero, finite, offset, row_length,
    table, tensor_scale, exponent, rows, sums, scratch,
):  # fmt: skip
    if values.dtype == types.float32:
        return _add_chunk_float32
    return _add_chunk_float64


def _add_chunk_float32(
    values, bits, sign_mask, inf_bits, subnormals, read_as_zero, finite, offset, row_length,
    table, tensor_scale, exponent, rows, sums, scratch,
):  # fmt: skip
    starts, patterns, exponents, first, second, dequanta, tables, pad = scratch[:8]
    per_value_int, per_value_32, per_value_64, probe = scratch[8:12]
    flushed = subnormals > 0 and probe[0] == 0.0  # subnormal operands read as 0
    nb = _cut_both(len(values), offset, row_length, table, starts)
    for which in range(2):
        if nb[which] >= 0:
            size = 32 if which == 0 else 16
            _blocks_float32.largest_magnitudes(
                values, starts[which], nb[which], size, finite, patterns[which]
            )
    for f in range(table.shape[0]):
        rule, size, _, _, _, _, scale_lo, _ = table[f]
        which = 0 if size == 32 else 1
        block_starts, block_patterns, n_blocks = starts[which], patterns[which], nb[which]
        row = rows[f]
        if rule == NVFP4 and not flushed and _block_scales.nvfp4_in_lanes(tensor_scale):
            _block_scales.nvfp4_scales(
                block_patterns, n_blocks, tensor_scale, scale_lo, row, exponents, first, second,
                tables,
            )  # fmt: skip
            under, over, raw = _blocks_float32.nvfp4_values(
                values, block_starts, n_blocks, finite, first, second, tensor_scale, pad
            )
            under -= read_as_zero
            error = raw * math.ldexp(1.0, -2 * exponent)
        elif rule == NVFP4:
            _blocks_exact.nvfp4_scales(
                block_patterns, n_blocks, tensor_scale, scale_lo, row, first, dequanta
            )
            under, over, error = _blocks_exact.nvfp4_values(
                bits, block_starts, n_blocks, first, dequanta, exponent, per_value_32,
                per_value_64,
            )  # fmt: skip
        else:
            _block_scales.mx_scales(
                block_patterns, n_blocks, table[f], exponent, row, exponents, first, second,
                tables,
            )  # fmt: skip
            if flushed:
                under, over, error = _blocks_exact.mx_values(
                    bits, block_starts, n_blocks, exponents, table[f], exponent, per_value_int,
                    per_value_32,
                )  # fmt: skip
            else:
                under, over, error = _blocks_float32.mx_values(
                    values, block_starts, n_blocks, finite, first, second, table[f], pad
                )
                under -= read_as_zero
        row[UNDER] += under
        row[OVER] += over
        sums[f] += error


def _add_chunk_float64(
    values, bits, sign_mask, inf_bits, subnormals, read_as_zero, finite, offset, row_length,
    table, tensor_scale, exponent, rows, sums, scratch,
):  # fmt: skip
    starts, buffers = scratch[0], scratch[12]
    nb = _cut_both(len(values), offset, row_length, table, starts)
    a = buffers[0][: len(values)]
    _blocks_float64.magnitudes(values, bits, sign_mask, inf_bits, a)
    _blocks_float64.add_chunk(a, starts, nb, table, tensor_scale, exponent, rows, sums, buffers[1:])
