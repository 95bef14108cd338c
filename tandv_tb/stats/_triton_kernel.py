"""The Triton kernels of the statistics engine: one read of a tensor's values gives
everything ``_array_kernel`` computes (``tensor_stats.engine_layout``).

Three kernels, each for one tensor (``MANY=False``: the tensor's pointer and sizes are
arguments, the grid's programs share it) or for many (``MANY=True``: a table of int64 words
gives each tensor's address, sizes and rows, and maps each program to a tensor; see
``_triton_launch``):

1. ``stats_main``: a bounded grid, each program striding over tiles of ``TILE`` blocks of
   ``BLOCK`` values along the rows of the last dimension (the rows' last, shorter blocks
   masked; without block formats a tensor is one row). From each tile's integer bit
   patterns: the histogram keys (``tl.histogram``), extremes, element formats' threshold
   counts and MX formats' block scales and per-value rounding (all integer arithmetic), and
   the power sums of ``s = x * 2**-unit`` with the tile's own unit, merged into the
   program's running sums (Chan et al. for the centred sum of squares). At the end a program
   adds its counts to the tensor's workspace row with integer atomics (exact in any order)
   and stores its moments row.
2. ``stats_nvfp4``: nvfp4's blocks of 16, which need the tensor's largest magnitude (from
   the workspace row, after ``stats_main``): torchao's float32 arithmetic, with correctly
   rounded divisions (``div_rn``); its rounding to E2M1 and E4M3 on bit patterns.
3. ``stats_finalize``: one program per tensor merges the programs' moments rows in a fixed
   order (vectors reduced by ``tl.sum``: the same record every time), writes the packed
   output and zeroes the workspace row for the next use.

Every value is read through its integer bit pattern and decoded by bit manipulation into
its float32 magnitude pattern ``w`` (exact for every dtype here), so no arithmetic sees a
subnormal operand where it matters and Triton's interpreter (whose bfloat16 arithmetic is
wrong) computes what a GPU does. The constants come from ``_triton_tables``.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

_F32 = np.finfo(np.float32)
_F64 = np.finfo(np.float64)
#: float32's layout (the compute format of every pattern ``w``) and float64's.
F32_MANT = tl.constexpr(int(_F32.nmant))
F32_HIDDEN = tl.constexpr(1 << int(_F32.nmant))
F32_MANT_MASK = tl.constexpr((1 << int(_F32.nmant)) - 1)
F32_BIAS = tl.constexpr(int(_F32.maxexp) - 1)
F32_ULP_LO = tl.constexpr(int(_F32.minexp) - int(_F32.nmant))  # the smallest subnormal's
F32_INF = tl.constexpr(int(np.array(np.inf, np.float32).view(np.int32)))
F32_FIELD_MAX = tl.constexpr(2 * (int(_F32.maxexp) - 1))  # the largest finite field
F64_MANT = tl.constexpr(int(_F64.nmant))
F64_BIAS = tl.constexpr(int(_F64.maxexp) - 1)
#: The unit exponent of sums that have seen no finite non-zero value.
NO_UNIT = tl.constexpr(-4096)


# ------------------------------------------------------------------ bit-pattern helpers


@triton.jit
def bits_pointer(address, SRC_BITS: tl.constexpr, FROM_TABLE: tl.constexpr):
    """A pointer to integers of the source dtype's width at ``address``: an int64 address
    from a table, or a pointer argument reinterpreted."""
    if SRC_BITS == 8:
        return address.to(tl.pointer_type(tl.int8), bitcast=not FROM_TABLE)
    elif SRC_BITS == 16:
        return address.to(tl.pointer_type(tl.int16), bitcast=not FROM_TABLE)
    elif SRC_BITS == 32:
        return address.to(tl.pointer_type(tl.int32), bitcast=not FROM_TABLE)
    else:
        return address.to(tl.pointer_type(tl.int64), bitcast=not FROM_TABLE)


@triton.jit
def _magnitudes(raw, SRC_BITS: tl.constexpr, SRC_MANT: tl.constexpr, SRC_BIAS: tl.constexpr,
                FINITE_BELOW: tl.constexpr, INF_BITS: tl.constexpr):  # fmt: skip
    """(w, negative, finite, infinite) of int32-widened source patterns ``raw``: ``w`` is
    the float32 pattern of |x| (0 for NaN and Inf)."""
    negative = raw < 0
    mag = raw & ((1 << (SRC_BITS - 1)) - 1)
    finite = mag < FINITE_BELOW
    infinite = mag == INF_BITS
    if SRC_BITS == 32:
        w = mag
    elif SRC_MANT + 32 - SRC_BITS == F32_MANT and SRC_BIAS == F32_BIAS:  # float32's top bits
        w = mag << (32 - SRC_BITS)
    else:  # a normal float32 either way: rebias the field, or scale a subnormal's mantissa
        field = mag >> SRC_MANT
        fraction = mag & ((1 << SRC_MANT) - 1)
        normal = ((field - SRC_BIAS + F32_BIAS) << F32_MANT) | (fraction << (F32_MANT - SRC_MANT))
        tiny = fraction.to(tl.float32).to(tl.int32, bitcast=True)
        tiny = tl.where(fraction == 0, 0, tiny + (1 - SRC_BIAS - SRC_MANT) * F32_HIDDEN)
        w = tl.where(field == 0, tiny, normal)
    return tl.where(finite, w, 0), negative, finite, infinite


@triton.jit
def _floor_log2(w):
    """floor(log2 |x|) of float32 patterns ``w > 0`` (subnormals through their integer
    mantissa, a normal float32)."""
    field = w >> F32_MANT
    tiny = (w.to(tl.float32).to(tl.int32, bitcast=True) >> F32_MANT) - F32_BIAS + F32_ULP_LO
    return tl.where(field == 0, tiny, field - F32_BIAS)


@triton.jit
def _significand(w):
    """(m, e) with |x| = m * 2**e, m the integer significand of float32 patterns ``w``."""
    field = w >> F32_MANT
    m = tl.where(field == 0, w, (w & F32_MANT_MASK) | F32_HIDDEN)
    return m, tl.maximum(field, 1) - F32_BIAS - F32_MANT


@triton.jit
def _pow2_f32(e):
    """2**e (int32 e) as float32; 0 below the normal range, clipped at the top."""
    field = tl.minimum(e + F32_BIAS, F32_FIELD_MAX)
    return tl.where(field > 0, field << F32_MANT, 0).to(tl.float32, bitcast=True)


@triton.jit
def _pow2_f64(e):
    """2**e (integer e, at most float64's largest exponent) as float64; 0 below its
    normal range."""
    field = e.to(tl.int64) + F64_BIAS
    return tl.where(field > 0, field << F64_MANT, 0).to(tl.float64, bitcast=True)


@triton.jit
def _decode_f64(w):
    """float32 patterns ``w`` (at or above Inf's: Inf) as float64 values."""
    m, e = _significand(w)
    value = m.to(tl.float64) * _pow2_f64(e)
    return tl.where(w >= F32_INF, float("inf"), value)


@triton.jit
def _round_to_element(m, e, lowest, EMIN: tl.constexpr, MANT: tl.constexpr):
    """(r, d) for values m * 2**e of exponent ``lowest`` (floor(log2)) divided by a power of
    two and rounded, ties to even, to an element format of EMIN and MANT mantissa bits,
    exponents relative to the scale: the result is r quanta of 2**(max(lowest, EMIN) -
    MANT), and ``d`` is m less r quanta, in units of 2**e (exact integers)."""
    shift = tl.maximum(lowest, EMIN) - MANT - e
    s = tl.minimum(tl.maximum(shift, 1), 30)
    odd = (m >> s) & 1
    rounded = (m + (1 << (s - 1)) - 1 + odd) >> s
    exact = m << tl.minimum(tl.maximum(-shift, 0), MANT)
    r = tl.where(shift >= 1, rounded, exact)
    d = tl.where(shift >= 1, m - (rounded << s), 0)
    return r, d


@triton.jit
def _rows(b, row_length, BLOCK: tl.constexpr):
    """(first value, values) of blocks ``b`` (int64) along rows of ``row_length``."""
    per_row = (row_length + BLOCK - 1) // BLOCK
    row = b // per_row
    k = b - row * per_row
    return row * row_length + k * BLOCK, tl.minimum(row_length - k * BLOCK, BLOCK)


@triton.jit
def _extract(vector, index, j):
    """Element ``j`` of a small vector (whose positions are ``index``)."""
    return tl.sum(tl.where(index == j, vector, 0))


@triton.jit
def table_entry(table_ptr, g, TABLE_WIDTH: tl.constexpr):
    """(its tensor's words, program within the tensor, tensor) of program ``g`` in a
    many-tensor table: the number of tensors, ``TABLE_WIDTH`` words per tensor, then a
    (tensor, program) pair per program."""
    tensors = tl.load(table_ptr)
    t = tl.load(table_ptr + 1 + tensors * TABLE_WIDTH + 2 * g)
    p = tl.load(table_ptr + 2 + tensors * TABLE_WIDTH + 2 * g)
    return table_ptr + 1 + t * TABLE_WIDTH, p, t


@triton.jit
def _tile(x, tile, row_length, total, SRC_BITS: tl.constexpr, SRC_MANT: tl.constexpr,
          SRC_BIAS: tl.constexpr, FINITE_BELOW: tl.constexpr, INF_BITS: tl.constexpr,
          BLOCK: tl.constexpr, TILE: tl.constexpr):  # fmt: skip
    """Tile ``tile``: ``TILE`` blocks of ``BLOCK`` values along the rows, read once.
    (w, negative, finite, infinite, inside, exists) of its values (``_magnitudes``;
    ``inside`` masks the values of blocks that exist, ``finite`` is false outside) and
    blocks (``exists``: within the tensor's ``total`` blocks)."""
    b = tl.cast(tile, tl.int64) * TILE + tl.arange(0, TILE)
    start, length = _rows(b, row_length, BLOCK)
    exists = b < total
    lane = tl.arange(0, BLOCK)
    inside = (lane[None, :] < length[:, None]) & exists[:, None]
    raw = tl.load(x + start[:, None] + lane[None, :], mask=inside, other=0).to(tl.int32)
    w, negative, finite, infinite = _magnitudes(
        raw, SRC_BITS, SRC_MANT, SRC_BIAS, FINITE_BELOW, INF_BITS
    )
    return w, negative, finite & inside, infinite, inside, exists


@triton.jit
def _tensor(g, table_ptr, x_ptr, numel, row_length, ws_ptr, part_ptr,
            MANY: tl.constexpr, SRC_BITS: tl.constexpr, WS_WIDTH: tl.constexpr,
            PART_WIDTH: tl.constexpr, TABLE_WIDTH: tl.constexpr):  # fmt: skip
    """(values, numel, row length, workspace row, moments row, program, programs) of
    program ``g``: from the arguments, or (``MANY``) from the table, whose words are per
    tensor: address, numel, row length, first moments row, programs, output offset;
    after ``TABLE_WIDTH`` words per tensor come (tensor, program) pairs per program."""
    if MANY:
        entry, p, t = table_entry(table_ptr, g, TABLE_WIDTH)
        x = bits_pointer(tl.load(entry), SRC_BITS, True)
        numel = tl.load(entry + 1)
        row_length = tl.load(entry + 2)
        part_row = part_ptr + (tl.load(entry + 3) + p) * PART_WIDTH
        programs = tl.load(entry + 4)
        ws_row = ws_ptr + t * WS_WIDTH
    else:
        x = bits_pointer(x_ptr, SRC_BITS, False)
        p = g
        programs = tl.num_programs(0)
        part_row = part_ptr + g * PART_WIDTH
        ws_row = ws_ptr
    return x, numel, row_length, ws_row, part_row, p, programs


# ------------------------------------------------------------------ the main kernel


@triton.jit
def stats_main(
    x_ptr, numel, row_length, table_ptr, ws_ptr, part_ptr,
    SRC_BITS: tl.constexpr, SRC_MANT: tl.constexpr, SRC_BIAS: tl.constexpr,
    FINITE_BELOW: tl.constexpr, INF_BITS: tl.constexpr,
    HIST_LO: tl.constexpr, N_KEYS: tl.constexpr, KEYS_P2: tl.constexpr,
    ELEMENTS: tl.constexpr, N_ELEMENTS: tl.constexpr, MX: tl.constexpr, N_MX: tl.constexpr,
    MX_P2: tl.constexpr, MX_SCALE_SLOTS: tl.constexpr, SCALES_P2: tl.constexpr,
    SMALL_SLOTS: tl.constexpr, N_SMALL: tl.constexpr, SMALL_P2: tl.constexpr,
    MX_SCALE_MIN: tl.constexpr, MX_SCALE_MAX: tl.constexpr,
    N_COUNTS: tl.constexpr, WS_WIDTH: tl.constexpr, PART_WIDTH: tl.constexpr,
    MANY: tl.constexpr, TABLE_WIDTH: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr,
):  # fmt: skip
    """Counts into the workspace rows, moments rows per program (module docstring, 1)."""
    x, numel, row_length, ws_row, part_row, p, programs = _tensor(
        tl.program_id(0), table_ptr, x_ptr, numel, row_length, ws_ptr, part_ptr,
        MANY, SRC_BITS, WS_WIDTH, PART_WIDTH, TABLE_WIDTH,
    )  # fmt: skip
    total = (numel // row_length) * ((row_length + BLOCK - 1) // BLOCK)
    small_index = tl.arange(0, SMALL_P2)
    mx_index = tl.arange(0, MX_P2)

    hist = tl.zeros([KEYS_P2], tl.int64)
    small = tl.zeros([SMALL_P2], tl.int64)
    scales = tl.zeros([MX_P2, SCALES_P2], tl.int32)
    largest = tl.zeros([], tl.int32)
    least = tl.full([], F32_INF, tl.int32)
    least_nonzero = tl.full([], F32_INF, tl.int32)
    unit = tl.full([], NO_UNIT, tl.int32)
    count = tl.zeros([], tl.float64)
    sum_s = tl.zeros([], tl.float64)
    sum_abs = tl.zeros([], tl.float64)
    sum_s2 = tl.zeros([], tl.float64)
    sum_s4 = tl.zeros([], tl.float64)
    sum_s8 = tl.zeros([], tl.float64)
    m2 = tl.zeros([], tl.float64)
    errors = tl.zeros([MX_P2], tl.float64)

    for tile in range(p, tl.cdiv(total, TILE), programs):
        w, negative, finite, infinite, inside, exists = _tile(
            x, tile, row_length, total, SRC_BITS, SRC_MANT, SRC_BIAS, FINITE_BELOW, INF_BITS,
            BLOCK, TILE,
        )  # fmt: skip
        live = w != 0  # finite, non-zero and inside
        exponent = _floor_log2(w)

        special = tl.where(infinite, tl.where(negative, 4, 3), 2)  # COUNTS' slots
        keys = tl.where(live, exponent - HIST_LO + 5, tl.where(finite, 1, special))
        hist += tl.histogram(
            tl.reshape(keys, [TILE * BLOCK]), KEYS_P2, mask=tl.reshape(inside, [TILE * BLOCK])
        ).to(tl.int64)

        top = tl.max(w)
        largest = tl.maximum(largest, top)
        least = tl.minimum(least, tl.min(tl.where(finite, w, F32_INF)))
        least_nonzero = tl.minimum(least_nonzero, tl.min(tl.where(live, w, F32_INF)))

        for f in tl.static_range(N_ELEMENTS):
            under_at = tl.where(negative, ELEMENTS[6 * f + 1], ELEMENTS[6 * f])
            over_at = tl.where(negative, ELEMENTS[6 * f + 3], ELEMENTS[6 * f + 2])
            nan_below = tl.where(negative, ELEMENTS[6 * f + 5], ELEMENTS[6 * f + 4])
            under = tl.sum((live & (w <= under_at)).to(tl.int64))
            over = tl.sum((live & ((w >= over_at) | (w < nan_below))).to(tl.int64))
            small += tl.where(small_index == 2 * f, under, 0)
            small += tl.where(small_index == 2 * f + 1, over, 0)

        # Moments in the tile's unit: s = m * 2**(e - unit), exact (or below float32's
        # normal range, far below the sums' rounding).
        tile_unit = tl.where(top > 0, _floor_log2(top), NO_UNIT)
        m, e = _significand(w)
        s = m.to(tl.float32) * _pow2_f32(e - tile_unit)
        s = tl.where(negative, -s, s)
        n = tl.sum(finite.to(tl.float32))
        t1 = tl.sum(s)
        s2 = s * s
        s4 = s2 * s2
        centred = tl.where(finite, s - t1 / tl.maximum(n, 1.0), 0.0)
        t2 = tl.sum(s2)
        t4 = tl.sum(s4)
        t8 = tl.sum(s4 * s4)

        # MX formats: each block's scale from its largest finite magnitude, then each
        # value's rounding to the element, in integers.
        block_top = tl.max(w, axis=1)
        live_block = (block_top != 0) & exists
        zero_block = (block_top == 0) & exists
        block_exponent = _floor_log2(block_top)
        significand = _significand(block_top)[0].to(tl.int64)
        tile_errors = tl.zeros([MX_P2], tl.float32)
        for k in tl.static_range(N_MX):
            RCEIL: tl.constexpr = MX[8 * k] == 1
            EMAX: tl.constexpr = MX[8 * k + 1]
            EMIN: tl.constexpr = MX[8 * k + 2]
            MANT: tl.constexpr = MX[8 * k + 3]
            MAX_MANT: tl.constexpr = MX[8 * k + 4]
            SCALE_LO: tl.constexpr = MX[8 * k + 5]
            raw_scale = block_exponent - EMAX
            if RCEIL:  # one up where amax's significand exceeds the element's largest
                raw_scale += ((significand << MANT) > (MAX_MANT * F32_HIDDEN)).to(tl.int32)
            clamped_low = live_block & (raw_scale < MX_SCALE_MIN)
            clamped_high = live_block & (raw_scale > MX_SCALE_MAX)
            scale = tl.minimum(tl.maximum(raw_scale, MX_SCALE_MIN), MX_SCALE_MAX)
            scale = tl.where(live_block, scale, MX_SCALE_MIN)
            relative = exponent - scale[:, None]
            r, d = _round_to_element(m, e - scale[:, None], relative, EMIN, MANT)
            saturated = live & ((relative > EMAX) | ((relative == EMAX) & (r > MAX_MANT)))
            below = live & (r == 0)
            ratio = _pow2_f32(e - tile_unit)
            largest_error = m.to(tl.float32) * ratio - MAX_MANT * _pow2_f32(
                EMAX - MANT + scale[:, None] - tile_unit
            )
            error = tl.where(saturated, largest_error, d.to(tl.float32) * ratio)
            error_sum = tl.sum(tl.where(live, error * error, 0.0))
            tile_errors += tl.where(mx_index == k, error_sum, 0.0)
            hits = tl.histogram(scale - SCALE_LO, SCALES_P2, mask=live_block)
            scales += tl.where(mx_index[:, None] == k, hits[None, :], 0)
            at = N_ELEMENTS * 2 + 5 * k
            small += tl.where(small_index == at, tl.sum(below.to(tl.int64)), 0)
            small += tl.where(small_index == at + 1, tl.sum(saturated.to(tl.int64)), 0)
            small += tl.where(small_index == at + 2, tl.sum(zero_block.to(tl.int64)), 0)
            small += tl.where(small_index == at + 3, tl.sum(clamped_low.to(tl.int64)), 0)
            small += tl.where(small_index == at + 4, tl.sum(clamped_high.to(tl.int64)), 0)

        # Merge the tile into the program's sums, both in the larger unit.
        merged = tl.maximum(unit, tile_unit)
        fa = _pow2_f64(unit - merged)
        fb = _pow2_f64(tile_unit - merged)
        fa2 = fa * fa
        fb2 = fb * fb
        n64 = n.to(tl.float64)
        total_count = count + n64
        delta = t1.to(tl.float64) * fb / tl.maximum(n64, 1.0) - sum_s * fa / tl.maximum(count, 1.0)
        between = tl.where(
            (count > 0) & (n64 > 0), delta * delta * count * n64 / tl.maximum(total_count, 1.0), 0.0
        )
        m2 = m2 * fa2 + tl.sum(centred * centred).to(tl.float64) * fb2 + between
        sum_s = sum_s * fa + t1.to(tl.float64) * fb
        sum_abs = sum_abs * fa + tl.sum(tl.abs(s)).to(tl.float64) * fb
        sum_s2 = sum_s2 * fa2 + t2.to(tl.float64) * fb2
        sum_s4 = sum_s4 * fa2 * fa2 + t4.to(tl.float64) * fb2 * fb2
        sum_s8 = sum_s8 * (fa2 * fa2) * (fa2 * fa2) + t8.to(tl.float64) * (fb2 * fb2) * (fb2 * fb2)
        errors = errors * fa2 + tile_errors.to(tl.float64) * fb2
        count = total_count
        unit = merged

    # Counts: integer atomics into the tensor's workspace row.
    keys_index = tl.arange(0, KEYS_P2)
    tl.atomic_add(ws_row + keys_index, hist, mask=(keys_index < N_KEYS) & (hist != 0))
    for j in tl.static_range(N_SMALL):
        tl.atomic_add(ws_row + SMALL_SLOTS[j], _extract(small, small_index, j))
    tl.atomic_max(ws_row + N_COUNTS, largest.to(tl.int64))
    tl.atomic_max(ws_row + N_COUNTS + 1, (-least + F32_INF).to(tl.int64))
    tl.atomic_max(ws_row + N_COUNTS + 2, (-least_nonzero + F32_INF).to(tl.int64))
    scale_index = tl.arange(0, SCALES_P2)
    for k in tl.static_range(N_MX):
        hits = tl.sum(tl.where(mx_index[:, None] == k, scales, 0), axis=0).to(tl.int64)
        tl.atomic_add(
            ws_row + MX_SCALE_SLOTS[k] + scale_index,
            hits,
            mask=(scale_index < MX[8 * k + 6]) & (hits != 0),
        )

    # Moments: the program's row (``_triton_tables.PART_FIELDS``, then block errors).
    tl.store(part_row, unit.to(tl.float64))
    tl.store(part_row + 1, count)
    tl.store(part_row + 2, sum_s)
    tl.store(part_row + 3, sum_abs)
    tl.store(part_row + 4, sum_s2)
    tl.store(part_row + 5, sum_s4)
    tl.store(part_row + 6, sum_s8)
    tl.store(part_row + 7, m2)
    for k in tl.static_range(N_MX):
        tl.store(part_row + MX[8 * k + 7], _extract(errors, mx_index, k))


# ------------------------------------------------------------------ nvfp4


@triton.jit
def stats_nvfp4(
    x_ptr, numel, row_length, table_ptr, ws_ptr, part_ptr,
    SRC_BITS: tl.constexpr, SRC_MANT: tl.constexpr, SRC_BIAS: tl.constexpr,
    FINITE_BELOW: tl.constexpr, INF_BITS: tl.constexpr,
    NVFP4: tl.constexpr, NVFP4_SLOTS: tl.constexpr, ELEMENT_MAX: tl.constexpr,
    DIVISOR: tl.constexpr, LOWEST: tl.constexpr, HIGHEST: tl.constexpr,
    SCALE_DROP: tl.constexpr, SCALES_P2: tl.constexpr,
    N_COUNTS: tl.constexpr, WS_WIDTH: tl.constexpr, PART_WIDTH: tl.constexpr,
    MANY: tl.constexpr, TABLE_WIDTH: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr,
):  # fmt: skip
    """nvfp4's counts and squared errors (module docstring, 2), after ``stats_main``."""
    x, numel, row_length, ws_row, part_row, p, programs = _tensor(
        tl.program_id(0), table_ptr, x_ptr, numel, row_length, ws_ptr, part_ptr,
        MANY, SRC_BITS, WS_WIDTH, PART_WIDTH, TABLE_WIDTH,
    )  # fmt: skip
    EMAX: tl.constexpr = NVFP4[0]
    EMIN: tl.constexpr = NVFP4[1]
    MANT: tl.constexpr = NVFP4[2]
    MAX_MANT: tl.constexpr = NVFP4[3]
    SCALE_LO: tl.constexpr = NVFP4[4]
    N_SCALES: tl.constexpr = NVFP4[5]
    # torchao's per-tensor scale, amax / DIVISOR in float32, and its inverse.
    amax_bits = tl.load(ws_row + N_COUNTS).to(tl.int32)
    tensor_scale = tl.math.div_rn(amax_bits.to(tl.float32, bitcast=True), DIVISOR)
    inverse = tl.math.div_rn(tl.full([], 1.0, tl.float32), tensor_scale)
    unit = tl.where(amax_bits > 0, _floor_log2(amax_bits), 0)  # the tensor's, as finalize's
    to_unit = _pow2_f64(-unit)
    total = (numel // row_length) * ((row_length + BLOCK - 1) // BLOCK)

    under = tl.zeros([], tl.int64)
    over = tl.zeros([], tl.int64)
    zero_blocks = tl.zeros([], tl.int64)
    clamped_low = tl.zeros([], tl.int64)
    clamped_high = tl.zeros([], tl.int64)
    scales = tl.zeros([SCALES_P2], tl.int32)
    errors = tl.zeros([], tl.float64)
    for tile in range(p, tl.cdiv(total, TILE), programs):
        w, _, _, _, _, exists = _tile(
            x, tile, row_length, total, SRC_BITS, SRC_MANT, SRC_BIAS, FINITE_BELOW, INF_BITS,
            BLOCK, TILE,
        )  # fmt: skip
        live = w != 0
        block_top = tl.max(w, axis=1)
        live_block = (block_top != 0) & exists
        zero_blocks += tl.sum(((block_top == 0) & exists).to(tl.int64))
        raw_scale = tl.math.div_rn(
            tl.math.div_rn(block_top.to(tl.float32, bitcast=True), ELEMENT_MAX), tensor_scale
        )
        clamped_low += tl.sum((live_block & (raw_scale < LOWEST)).to(tl.int64))
        clamped_high += tl.sum((live_block & (raw_scale > HIGHEST)).to(tl.int64))
        clamped = tl.where(live_block, tl.minimum(tl.maximum(raw_scale, LOWEST), HIGHEST), LOWEST)
        # E4M3 rounding of a normal float32: to nearest, ties to even, on the pattern.
        c = clamped.to(tl.int32, bitcast=True)
        rounded = (c + (1 << (SCALE_DROP - 1)) - 1 + ((c >> SCALE_DROP) & 1)) >> SCALE_DROP
        scale_bits = rounded << SCALE_DROP
        block_scale = scale_bits.to(tl.float32, bitcast=True)
        scale_exponent = (scale_bits >> F32_MANT) - F32_BIAS
        scales += tl.histogram(scale_exponent - SCALE_LO, SCALES_P2, mask=live_block)
        reciprocal = tl.math.div_rn(inverse + tl.zeros_like(block_scale), block_scale)
        v = w.to(tl.float32, bitcast=True) * reciprocal[:, None]
        v_bits = tl.where(live, v.to(tl.int32, bitcast=True), 0)
        m, e = _significand(v_bits)
        v_exponent = _floor_log2(v_bits)
        r = _round_to_element(m, e, v_exponent, EMIN, MANT)[0]
        saturated = live & ((v_exponent > EMAX) | ((v_exponent == EMAX) & (r > MAX_MANT)))
        under += tl.sum((live & (r == 0)).to(tl.int64))
        over += tl.sum(saturated.to(tl.int64))
        q = r.to(tl.float32) * _pow2_f32(tl.maximum(v_exponent, EMIN) - MANT)
        q = tl.where(saturated, ELEMENT_MAX, q)
        dequantized = (q * block_scale[:, None]).to(tl.float64) * tensor_scale.to(tl.float64)
        error = (_decode_f64(w) - dequantized) * to_unit
        errors += tl.sum(tl.where(live, error * error, 0.0))

    tl.atomic_add(ws_row + NVFP4_SLOTS[0], under)
    tl.atomic_add(ws_row + NVFP4_SLOTS[1], over)
    tl.atomic_add(ws_row + NVFP4_SLOTS[2], zero_blocks)
    tl.atomic_add(ws_row + NVFP4_SLOTS[3], clamped_low)
    tl.atomic_add(ws_row + NVFP4_SLOTS[4], clamped_high)
    scale_index = tl.arange(0, SCALES_P2)
    tl.atomic_add(
        ws_row + NVFP4_SLOTS[5] + scale_index,
        scales.to(tl.int64),
        mask=(scale_index < N_SCALES) & (scales != 0),
    )
    tl.store(part_row + NVFP4[6], errors)


# ------------------------------------------------------------------ finalize


@triton.jit
def stats_finalize(
    out_ptr, out_offset, numel, programs, table_ptr, ws_ptr, part_ptr,
    N_COUNTS: tl.constexpr, COUNTS_P2: tl.constexpr, WS_WIDTH: tl.constexpr,
    PART_WIDTH: tl.constexpr, PROGRAMS_P2: tl.constexpr, ZERO_OVERFLOW: tl.constexpr,
    N_ZERO_OVERFLOW: tl.constexpr, BLOCK_SLOTS: tl.constexpr, BLOCK_IN_PROGRAM_UNIT: tl.constexpr,
    N_BLOCKS: tl.constexpr, MANY: tl.constexpr, TABLE_WIDTH: tl.constexpr,
):  # fmt: skip
    """The packed output of one tensor, its workspace row zeroed (module docstring, 3)."""
    t = tl.program_id(0)
    if MANY:
        entry = table_ptr + 1 + t * TABLE_WIDTH
        numel = tl.load(entry + 1)
        part_row = part_ptr + tl.load(entry + 3) * PART_WIDTH
        programs = tl.load(entry + 4)
        out = out_ptr + out_offset + tl.load(entry + 5)
        ws_row = ws_ptr + t * WS_WIDTH
    else:
        part_row = part_ptr
        out = out_ptr + out_offset
        ws_row = ws_ptr

    index = tl.arange(0, COUNTS_P2)
    counts = tl.load(ws_row + index, mask=index < N_COUNTS, other=0)
    zeros = tl.load(ws_row + 1)
    counts = tl.where(index == 0, numel, counts)
    for j in tl.static_range(N_ZERO_OVERFLOW):
        counts += tl.where(index == ZERO_OVERFLOW[j], zeros, 0)
    tl.store(out + index, counts, mask=index < N_COUNTS)
    largest = tl.load(ws_row + N_COUNTS).to(tl.int32)
    least = -tl.load(ws_row + N_COUNTS + 1).to(tl.int32) + F32_INF
    least_nonzero = -tl.load(ws_row + N_COUNTS + 2).to(tl.int32) + F32_INF
    tl.debug_barrier()  # every thread has read the row before any zeroes it
    tl.store(ws_row + index, tl.zeros([COUNTS_P2], tl.int64), mask=index < WS_WIDTH)

    # The programs' moments rows, in the largest unit, reduced in a fixed order.
    p = tl.arange(0, PROGRAMS_P2)
    row = part_row + p * PART_WIDTH
    present = p < programs
    units = tl.load(row, mask=present, other=NO_UNIT).to(tl.int32)
    unit = tl.max(units)
    f = _pow2_f64(units - unit)
    f2 = f * f
    n = tl.load(row + 1, mask=present, other=0.0)
    s1 = tl.load(row + 2, mask=present, other=0.0) * f
    count = tl.sum(n)
    sum_s = tl.sum(s1)
    mean = sum_s / tl.maximum(count, 1.0)
    deviation = tl.where(n > 0, s1 / tl.maximum(n, 1.0) - mean, 0.0)
    m2 = tl.sum(tl.load(row + 7, mask=present, other=0.0) * f2 + n * deviation * deviation)
    f4 = f2 * f2
    sum_s2 = tl.sum(tl.load(row + 4, mask=present, other=0.0) * f2)
    moments = out.to(tl.pointer_type(tl.float64), bitcast=True) + N_COUNTS
    found = unit != NO_UNIT
    tl.store(moments, tl.where(found, _pow2_f64(unit), 1.0))
    tl.store(moments + 1, sum_s)
    tl.store(moments + 2, tl.sum(tl.load(row + 3, mask=present, other=0.0) * f))
    tl.store(moments + 3, sum_s2)
    tl.store(moments + 4, tl.sum(tl.load(row + 5, mask=present, other=0.0) * f4))
    tl.store(moments + 5, tl.sum(tl.load(row + 6, mask=present, other=0.0) * f4 * f4))
    tl.store(moments + 6, m2)
    tl.store(moments + 7, _decode_f64(largest))
    tl.store(moments + 8, _decode_f64(least))
    tl.store(moments + 9, _decode_f64(least_nonzero))
    for k in tl.static_range(N_BLOCKS):
        errors = tl.load(row + 8 + k, mask=present, other=0.0)
        if BLOCK_IN_PROGRAM_UNIT[k]:
            errors = errors * f2
        at = moments + BLOCK_SLOTS[k]
        tl.store(at, tl.where(found, unit, 0).to(tl.float64))
        tl.store(at + 1, sum_s2)
        tl.store(at + 2, tl.sum(errors))
