"""The array-library kernel: branch-free, for accelerators and for code under ``jax.jit``.

Written once over a tiny adapter (``TorchOps``, ``JaxOps``): nothing here reads a value back
to the host, so it runs asynchronously on a GPU and traces under ``jax.jit``. Three passes
over the values, each one reduction of several outputs (``ops.fold``; for jax one variadic
``lax.reduce``, which XLA fuses with the elementwise work that feeds it):

1. one histogram (``ops.bincount``) of keys taken from the bit pattern: the zeros (key 0),
   each exponent bin, then NaN, +Inf and -Inf. The exponent is ``bits >> mantissa_bits``
   for normal numbers, and for a subnormal comes from its integer mantissa converted to a
   float. With it, one integer fold: the extremes of the magnitudes and the cast counts;
2. the power sums of the values scaled by a power of two near their largest magnitude;
3. the centred sum of squares (a second pass, for a stable ``std``);
4. per block-scaled format (``_block_format``), the values as rows of the last dimension
   cut into blocks (a last short block padded with zeros, which count nowhere): each
   block's largest magnitude and scale, then each value's element rounding, counts and
   squared error.

Outputs follow ``tensor_stats.engine_layout``.
"""

from __future__ import annotations

import math

import numpy as np

from tandv_tb.formats import info as dtype_info
from tandv_tb.formats.blocks import (
    MX_SCALE_MAX,
    MX_SCALE_MIN,
    NVFP4,
    NVFP4_ELEMENT_MAX,
    NVFP4_EMIN,
    NVFP4_MANTISSA_BITS,
    NVFP4_SCALE_MANTISSA_BITS,
    NVFP4_SCALE_MAX,
    NVFP4_SCALE_MIN,
    NVFP4_TENSOR_DIVISOR,
    RCEIL,
)
from tandv_tb.formats.kernel_tables import block_table, threshold_bits
from tandv_tb.stats._exact_division import divide_float32

_LAYOUT = {
    # compute dtype: (mantissa bits, exponent bias, all-ones exponent field)
    "float32": (23, 127, 255),
    "float64": (52, 1023, 2047),
}
# A fold's float sums add blocks of _DEPTH rows of _LANES values down the rows, then the
# blocks' results the same way, and so on: float32 sums keep their accuracy (no sum runs
# over more than _DEPTH or _LANES terms), and each level runs vectorised over the lanes.
_DEPTH, _LANES = 8, 32
# Histograms of up to this many keys and at least _PAIRS_FROM values count pairs of keys
# (a key² table, half as many scatter updates; the bins are its row plus column sums).
_PAIR_KEYS = 512
_PAIRS_FROM = 1 << 16


class TorchOps:
    """The few operations the kernel needs, for torch tensors on any device."""

    def __init__(self):
        import torch

        self.t = torch

    def int_view(self, x):
        return x.view(self.t.int64 if x.dtype == self.t.float64 else self.t.int32)

    def float_view(self, bits, like):
        return bits.view(like.dtype)

    def to_float(self, ints, like):
        return ints.to(like.dtype)

    def bincount(self, keys, length):
        """Counts of ``keys`` (integers in [0, length)), without a host sync:
        ``torch.bincount`` on CUDA reads the keys' extremes back to size its output. A
        histogram of the keys as float64 (exact counts up to 2**53), or, where torch must
        run deterministically (which refuses ``histc`` on CUDA), a 1-D ``scatter_add_``."""
        t = self.t
        if t.are_deterministic_algorithms_enabled():
            counts = t.zeros(length, dtype=t.int64, device=keys.device)
            return counts.scatter_add_(0, keys.long(), t.ones_like(keys, dtype=t.int64))
        return t.histc(keys.double(), bins=length, min=0, max=length).long()

    def clip(self, x, low, high):
        return self.t.clamp(x, low, high)

    def where(self, cond, a, b):
        return self.t.where(cond, a, b)

    def fold(self, parts):
        """``(kind, array, init)`` -> that reduction of each array (``init`` when empty);
        kind is "sum" (a bool array counts), "max" or "min"."""
        out = []
        for kind, x, init in parts:
            if kind == "sum":
                out.append(x.sum(dtype=self.t.int64 if x.dtype == self.t.bool else None))
            elif x.numel() == 0:
                out.append(self.t.full((), init, dtype=x.dtype, device=x.device))
            else:
                out.append(x.amax() if kind == "max" else x.amin())
        return out

    def _on_device(self, parts):
        """``parts`` as tensors on the device of those that are tensors (an empty tensor's
        block outputs are host numbers)."""
        device = next((p.device for p in parts if isinstance(p, self.t.Tensor)), None)
        return [self.t.as_tensor(p, device=device) for p in parts]

    def stack_counts(self, parts):
        return self.t.cat([p.reshape(-1).to(self.t.int64) for p in self._on_device(parts)])

    def stack_moments(self, parts):
        return self.t.stack([p.to(self.t.float64) for p in self._on_device(parts)])

    def scalar_like(self, value, like):
        """A 0-d tensor on ``like``'s device, filled there (``torch.tensor`` would copy it
        from the host, a sync on CUDA)."""
        return self.t.full((), value, dtype=like.dtype, device=like.device)

    def blocks(self, x, rows, size):
        """``x`` (flat) as ``rows`` rows cut into blocks of ``size`` (the last one padded
        with zeros): shape (rows, blocks per row, size)."""
        x = x.reshape(rows, -1)
        pad = -x.shape[1] % size
        if pad:
            x = self.t.nn.functional.pad(x, (0, pad))
        return x.reshape(rows, -1, size)

    def block_max(self, x):
        return x.amax(dim=-1, keepdim=True)

    def round_even(self, x):
        return self.t.round(x)

    def divide(self, a, b):
        """a / b, correctly rounded: on CUDA a tensor divided by a number is multiplied by
        its reciprocal (rounded twice), a tensor divided by a tensor is not."""
        if not isinstance(b, self.t.Tensor):
            b = self.scalar_like(b, a)
        return a / b

    def to_dtype(self, x, name):
        return x.to(getattr(self.t, name))


class JaxOps:
    """The same operations for jax arrays (traceable under ``jax.jit``)."""

    def __init__(self):
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp, self.lax = jax, jnp, jax.lax
        wide = jax.config.jax_enable_x64
        self.int_dtype = jnp.int64 if wide else jnp.int32
        self.float_dtype = jnp.float64 if wide else jnp.float32

    def int_view(self, x):
        return self.lax.bitcast_convert_type(
            x, self.jnp.int64 if x.dtype == self.jnp.float64 else self.jnp.int32
        )

    def float_view(self, bits, like):
        return self.lax.bitcast_convert_type(bits, like.dtype)

    def to_float(self, ints, like):
        return ints.astype(like.dtype)

    def bincount(self, keys, length):
        jnp = self.jnp
        n = keys.shape[0]
        if length > _PAIR_KEYS or n < _PAIRS_FROM:
            return jnp.bincount(keys, length=length)
        # Pairs of keys (the odd one out paired with the spare key ``length``).
        half = (n + 1) // 2
        first, second = keys[:half], keys[half:]
        if n % 2:
            second = jnp.concatenate([second, jnp.full((1,), length, keys.dtype)])
        side = length + 1
        table = jnp.zeros(side * side, self.int_dtype)
        table = table.at[first * side + second].add(1, mode="promise_in_bounds")
        table = table.reshape(side, side)
        return (table.sum(0) + table.sum(1))[:length]

    def clip(self, x, low, high):
        return self.jnp.clip(x, low, high)

    def where(self, cond, a, b):
        return self.jnp.where(cond, a, b)

    def fold(self, parts):
        """The reductions of ``TorchOps.fold`` in one variadic ``lax.reduce`` (float sums
        by ``_tree``)."""
        jnp, lax = self.jnp, self.lax
        kinds = [kind for kind, _, _ in parts]
        arrays = tuple(x.astype(self.int_dtype) if x.dtype == jnp.bool_ else x for _, x, _ in parts)
        inits = tuple(
            np.array(0 if kind == "sum" else init, dtype=x.dtype)
            for (kind, _, init), x in zip(parts, arrays)
        )
        ops = {"sum": lax.add, "max": lax.max, "min": lax.min}

        def combine(a, b):
            return tuple(ops[kind](p, q) for kind, p, q in zip(kinds, a, b))

        if len(arrays) == 1 and arrays[0].shape[0] > 1:
            # Two halves keep it one variadic fusion (XLA would hand a single reduction to
            # a library call that first writes its operand out).
            x, init = arrays[0], inits[0]
            if x.shape[0] % 2:
                x = jnp.pad(x, (0, 1), constant_values=init)
            half = x.shape[0] // 2
            (kind,) = kinds
            both = self.fold([(kind, x[:half], init), (kind, x[half:], init)])
            return [ops[kind](*both)]
        float_sums = any(
            kind == "sum" and jnp.issubdtype(x.dtype, jnp.floating)
            for kind, x in zip(kinds, arrays)
        )
        if float_sums:
            results = self._tree(arrays, inits, combine)
        else:  # integer sums, maxima and minima are exact in any order
            results = lax.reduce(arrays, inits, combine, (0,))
        return [jnp.asarray(r) for r in results]

    def _tree(self, arrays, inits, combine):
        """A fold of blocks of ``_DEPTH`` x ``_LANES`` values down their depth (vectorised
        over the lanes), then of those partial results, and so on; a last partial block is
        padded with ``inits``."""
        jnp, lax = self.jnp, self.lax
        block = _DEPTH * _LANES
        extra = None
        while arrays[0].shape[0] > _LANES:
            rows, rest = divmod(arrays[0].shape[0], block)
            if rest:
                tail = tuple(
                    jnp.pad(x[rows * block :], (0, block - rest), constant_values=i)
                    for x, i in zip(arrays, inits)
                )
                ends = self._tree(tail, inits, combine)
                extra = ends if extra is None else combine(extra, ends)
            if not rows:
                return extra
            body = tuple(x[: rows * block].reshape(rows, _DEPTH, _LANES) for x in arrays)
            arrays = tuple(p.reshape(-1) for p in lax.reduce(body, inits, combine, (1,)))
        result = lax.reduce(arrays, inits, combine, (0,))
        return result if extra is None else combine(result, extra)

    def stack_counts(self, parts):
        return self.jnp.concatenate(
            [self.jnp.reshape(self.jnp.asarray(p), (-1,)).astype(self.int_dtype) for p in parts]
        )

    def stack_moments(self, parts):
        return self.jnp.stack([self.jnp.asarray(p).astype(self.float_dtype) for p in parts])

    def scalar_like(self, value, like):
        return self.jnp.asarray(value, dtype=like.dtype)

    def blocks(self, x, rows, size):
        """``TorchOps.blocks``."""
        x = x.reshape(rows, -1)
        pad = -x.shape[1] % size
        if pad:
            x = self.jnp.pad(x, ((0, 0), (0, pad)))
        return x.reshape(rows, -1, size)

    def block_max(self, x):
        return self.jnp.max(x, axis=-1, keepdims=True)

    def round_even(self, x):
        return self.jnp.round(x)

    def divide(self, a, b):
        """a / b, correctly rounded. float32: by ``_exact_division`` (XLA on a GPU divides
        approximately). float64 (x64): XLA's simplifier turns a division by a scalar or a
        broadcast into a multiplication by its reciprocal, and (a / b) / c into
        a / (b * c), each rounded twice, unless it cannot see what made either operand."""
        b = self.jnp.broadcast_to(self.jnp.asarray(b, a.dtype), a.shape)
        if a.dtype == self.jnp.float32:
            return divide_float32(self.jnp, self.lax, a, b)
        a, b = self.lax.optimization_barrier((a, b))
        return a / b

    def to_dtype(self, x, name):
        return x.astype(getattr(self.jnp, name))


def compute_arrays(ops, values, dtype: str, formats: tuple[str, ...], row_length: int = 1):
    """Counts and moments of ``values`` (flat, float32 or float64, widened from ``dtype``);
    block formats take their blocks along rows of ``row_length`` values.

    Everything but the moments is decided on integer bit patterns (for non-negative floats
    their order is the values' order), so flush-to-zero arithmetic, which XLA uses on the
    CPU, cannot hide subnormals.
    """
    wide = str(values.dtype).endswith("float64")
    mant_bits, bias, all_ones = _LAYOUT["float64" if wide else "float32"]
    float_type, int_type = (np.float64, np.int64) if wide else (np.float32, np.int32)
    sign_mask = int(np.iinfo(int_type).max)
    inf_bits = int(np.array(np.inf, float_type).view(int_type))
    shift = mant_bits + 1
    info = dtype_info(dtype)
    numel = math.prod(values.shape)

    signed_bits = ops.int_view(values)
    negative = signed_bits < 0
    magnitude = signed_bits & sign_mask
    field = magnitude >> mant_bits
    finite = magnitude < inf_bits
    nonzero = magnitude != 0

    # Pass 1. A subnormal's bits are its integer mantissa m; as a float m is normal and
    # exact, and its exponent field gives floor(log2 m). Key 0 holds the zeros; after the
    # exponents come NaN, +Inf and -Inf.
    special = all_ones + shift
    mantissa_field = ops.int_view(ops.to_float(magnitude, values)) >> mant_bits
    subnormal_keys = ops.where(nonzero, mantissa_field - bias + 2, 0)
    infinite_keys = ops.where(negative, special + 2, special + 1)
    keys = ops.where(
        field == 0,
        subnormal_keys,
        ops.where(finite, field + shift, ops.where(magnitude == inf_bits, infinite_keys, special)),
    )
    bins = ops.bincount(keys, special + 3)
    first = info.min_exponent + bias + shift
    hist = bins[first : first + info.n_bins]
    zero, nan, posinf, neginf = bins[0], bins[special], bins[special + 1], bins[special + 2]

    folds = [
        ("max", ops.where(finite, magnitude, 0 * magnitude), 0),
        ("min", ops.where(finite, magnitude, inf_bits + 0 * magnitude), inf_bits),
        ("min", ops.where(finite & nonzero, magnitude, inf_bits + 0 * magnitude), inf_bits),
    ]
    live = finite & nonzero
    thresholds = threshold_bits(dtype, formats, wide).tolist()
    for t in thresholds:
        folds.append(("sum", live & (magnitude <= _by_sign(ops, negative, t[0], t[1])), 0))
        over = (magnitude >= _by_sign(ops, negative, t[2], t[3])) | (
            magnitude < _by_sign(ops, negative, t[4], t[5])
        )
        folds.append(("sum", live & over, 0))
    max_bits, min_bits, min_nonzero_bits, *cast_counts = ops.fold(folds)
    casts = [c + zero * t for c, t in zip(cast_counts, _zero_overflows(thresholds))]
    max_abs, min_abs, min_nonzero = (
        ops.float_view(b, values) for b in (max_bits, min_bits, min_nonzero_bits)
    )

    # Pass 2. s = x * 2**-e with 2**e near max|x|: exact, and no reciprocal underflows (XLA
    # turns a division into one, and flushes subnormals). A subnormal is never an operand:
    # its integer mantissa m (a normal float) is scaled instead, by 2**(1 - bias -
    # mant_bits - e), or by 0 where that is below the normal range (its share is then below
    # float rounding). When every finite value is subnormal, e is that of the largest m.
    max_field = max_bits >> mant_bits
    tiny = max_field == 0
    top_mantissa = (ops.int_view(ops.to_float(max_bits, values)) >> mant_bits) - bias
    e_tiny = ops.where(max_bits == 0, 0 * max_field, top_mantissa)
    e_normal = ops.clip(max_field - bias, 1 - bias, bias - 1)
    inverse_field = ops.where(tiny, bias - e_tiny, bias - e_normal)
    inverse = ops.float_view(inverse_field << mant_bits, values)
    subnormal_field = ops.where(tiny, inverse_field, ops.clip(1 - mant_bits - e_normal, 0, bias))
    subnormal_inverse = ops.float_view(subnormal_field << mant_bits, values)
    one_bits = ops.scalar_like(bias << mant_bits, magnitude)
    scale_bits = ops.where(
        max_bits == 0,
        one_bits,
        ops.where(tiny, ops.scalar_like(1, magnitude) << e_tiny, (bias + e_normal) << mant_bits),
    )
    scale = ops.float_view(scale_bits, values)
    signed_mantissas = ops.where(negative, -1.0, 1.0) * ops.to_float(magnitude, values)
    zero_f = 0.0 * inverse
    scaled = ops.where(
        field == 0,
        signed_mantissas * subnormal_inverse,
        ops.where(finite, values, zero_f) * inverse,
    )
    square = scaled * scaled
    fourth = square * square
    total, absolute, squares, fourths, eighths = ops.fold(
        [("sum", p, 0) for p in (scaled, abs(scaled), square, fourth, fourth * fourth)]
    )

    # Pass 3.
    finite_count = numel - nan - posinf - neginf
    mean_s = total / ops.where(finite_count > 0, finite_count, 1)
    centred = ops.where(finite, scaled - mean_s, zero_f)
    (spread,) = ops.fold([("sum", centred * centred, 0)])

    # Pass 4.
    layout = _Layout(mant_bits, bias, float_type, int_type)
    block_casts, block_counts, block_moments = [], [], []
    for row in block_table(dtype, formats).tolist():
        pair, section, sums = _block_format(
            ops, layout, values, ops.where(finite, magnitude, 0 * magnitude), max_bits, row,
            row_length, numel,
        )  # fmt: skip
        block_casts += pair
        block_counts += section
        block_moments += sums

    counts = ops.stack_counts(
        [numel + 0 * zero, zero, nan, posinf, neginf, hist, *casts, *block_casts, *block_counts]
    )
    moments = ops.stack_moments(
        [scale, total, absolute, squares, fourths, eighths, spread, max_abs, min_abs, min_nonzero]
        + block_moments
    )
    return counts, moments


class _Layout:
    """The compute dtype's bit layout, and exact powers of two in it."""

    def __init__(self, mant_bits: int, bias: int, float_type, int_type) -> None:
        self.mant_bits, self.bias = mant_bits, bias
        self.float_type, self.int_type = float_type, int_type
        self.mask = (1 << mant_bits) - 1

    def power(self, ops, exponent, like):
        """2**exponent (an integer array) as floats like ``like``, 0 below the normal
        range (flush-to-zero arithmetic would read a subnormal as 0 all the same)."""
        normal = exponent >= 1 - self.bias
        field = ops.where(normal, exponent + self.bias, 0 * exponent)
        return ops.float_view(field << self.mant_bits, like)

    def floor_log2(self, ops, bits, like):
        """(floor(log2 x), the bits of x with its significand normalised) of positive
        floats given by their bit patterns ``bits`` (subnormals through their integer
        mantissa, which is a normal float)."""
        field = bits >> self.mant_bits
        widened = ops.int_view(ops.to_float(bits, like))
        normalised = ops.where(field == 0, widened, bits)
        shift = ops.where(field == 0, 0 * field + self.bias + self.mant_bits - 1, 0 * field)
        return (normalised >> self.mant_bits) - self.bias - shift, normalised


def _round_to_element(ops, layout: _Layout, v, emin: int, mant_bits: int):
    """v >= 0 rounded to nearest, ties to even, at an element format's precision (no upper
    limit on the exponent): ``round(v / q) * q`` with q the element's quantum at v."""
    exponent = (ops.int_view(v) >> layout.mant_bits) - layout.bias
    quantum = ops.where(exponent > emin, exponent, 0 * exponent + emin) - mant_bits
    return ops.round_even(v * layout.power(ops, -quantum, v)) * layout.power(ops, quantum, v)


def _block_format(ops, layout, values, finite_bits, max_bits, row, row_length, numel):
    """((underflow, overflow), [zero blocks, clamped low, clamped high, blocks per scale
    exponent], [exponent, signal, error]) of one block format (``BlockFormat.kernel_row``
    ``row``) over ``values`` whose finite magnitudes' bit patterns are ``finite_bits``
    (0 for NaN/Inf), the largest of them ``max_bits``."""
    rule, size, emax, emin, mant_bits, max_mantissa, scale_lo, n_scales = row
    if numel == 0:
        return [0, 0], [0, 0, 0, np.zeros(n_scales, np.int64)], [0.0, 0.0, 0.0]
    rows = numel // row_length
    bits = ops.blocks(finite_bits, rows, size)
    block_bits = ops.block_max(bits)
    zero_block = block_bits == 0
    like = values
    largest = math.ldexp(float(max_mantissa), emax - mant_bits)
    top, _ = layout.floor_log2(ops, max_bits + (max_bits == 0), like)  # the sums' unit
    top = ops.clip(top, 1 - layout.bias, layout.bias - 1)  # 2**-top normal too
    nonzero = bits != 0
    if rule == NVFP4:
        return _nvfp4(ops, layout, values, bits, max_bits, nonzero, top, row)
    exponent, normalised = layout.floor_log2(ops, block_bits + zero_block, like)
    raw = exponent - emax
    if rule == RCEIL:
        significand = ((normalised & layout.mask) | (layout.mask + 1)) << mant_bits
        raw = raw + (significand > max_mantissa * (layout.mask + 1))
    low, high = MX_SCALE_MIN, MX_SCALE_MAX
    clamped_low = ~zero_block & (raw < low)
    clamped_high = ~zero_block & (raw > high)
    scale = ops.where(zero_block, 0 * raw + low, ops.clip(raw, low, high))
    # v = |x| / 2**scale: a normal value scaled exactly; a subnormal through its integer
    # mantissa (where that product is below the normal range, v is far below any
    # element's smallest value, and 0 serves as well).
    field = bits >> layout.mant_bits
    magnitudes = ops.float_view(bits, like)
    subnormal_unit = layout.power(ops, 1 - layout.bias - layout.mant_bits - scale, like)
    v = ops.where(
        field == 0,
        ops.to_float(bits, like) * subnormal_unit,
        magnitudes * layout.power(ops, -scale, like),
    )
    q = _round_to_element(ops, layout, v, emin, mant_bits)
    over = q > largest
    q = ops.where(over, 0 * q + largest, q)
    under = nonzero & (q == 0)
    to_unit = layout.power(ops, scale - top, like)
    signal = v * to_unit
    error = (v - q) * to_unit
    scales = ops.where(zero_block, 0 * scale + n_scales, scale - scale_lo)
    return _block_outputs(
        ops, under, over, zero_block, clamped_low, clamped_high, scales, n_scales, top,
        signal, error,
    )  # fmt: skip


def _nvfp4(ops, layout, values, bits, max_bits, nonzero, top, row):
    """``_block_format`` for nvfp4: torchao's float32 arithmetic (``formats.blocks``). Here
    subnormal float32 operands are left to the device: one that flushes them (XLA's CPU)
    differs from the definition only for tensors whose largest magnitude is below about
    2**-100, where the products of subnormals reach E2M1's range."""
    n_scales = row[7]
    f32 = _Layout(23, 127, np.float32, np.int32)
    wide = layout.mant_bits == 52
    magnitudes = ops.float_view(bits, values)
    saturated = ops.clip(magnitudes, 0.0, float(np.finfo(np.float32).max))
    a32 = ops.to_dtype(saturated, "float32") if wide else magnitudes
    block_bits = ops.block_max(ops.int_view(a32))  # as integers: no flushing
    block_max = ops.float_view(block_bits, a32)
    amax = ops.float_view(max_bits, values)
    amax = (
        ops.to_dtype(ops.clip(amax, 0.0, float(np.finfo(np.float32).max)), "float32")
        if wide
        else amax
    )
    tensor_scale = ops.divide(amax, np.float32(NVFP4_TENSOR_DIVISOR))
    zero_block = block_bits == 0
    raw = ops.divide(ops.divide(block_max, np.float32(NVFP4_ELEMENT_MAX)), tensor_scale)
    smallest = np.float32(2.0**NVFP4_SCALE_MIN)
    clamped_low = ~zero_block & (raw < smallest)
    clamped_high = ~zero_block & (raw > np.float32(NVFP4_SCALE_MAX))
    # A zero block's raw scale is NaN in an all-zero tensor (0 / 0): it takes the smallest.
    clamped = ops.clip(
        ops.where(zero_block, ops.scalar_like(smallest, raw), raw), smallest, NVFP4_SCALE_MAX
    )
    block_scale = _round_to_element(  # E4M3, normal here
        ops, f32, clamped, NVFP4_SCALE_MIN, NVFP4_SCALE_MANTISSA_BITS
    )
    exponent = (ops.int_view(block_scale) >> 23) - 127
    inverse = ops.divide(ops.scalar_like(1.0, tensor_scale), tensor_scale)
    reciprocal = ops.divide(inverse + 0 * block_scale, block_scale)
    v = ops.where(bits == 0, 0 * a32, a32 * reciprocal)
    q = _round_to_element(ops, f32, v, NVFP4_EMIN, NVFP4_MANTISSA_BITS)
    over = q > NVFP4_ELEMENT_MAX
    q = ops.where(over, 0 * q + NVFP4_ELEMENT_MAX, q)
    under = nonzero & (q == 0)
    to_unit = layout.power(ops, -top, values)
    dequantum = ops.to_float(block_scale, values) * ops.to_float(tensor_scale, values)
    dequantized = ops.to_float(q, values) * dequantum
    signal = magnitudes * to_unit
    error = (magnitudes - dequantized) * to_unit
    scales = ops.where(zero_block, 0 * exponent + n_scales, exponent - row[6])
    return _block_outputs(
        ops, under, over, zero_block, clamped_low, clamped_high, scales, n_scales, top,
        signal, error,
    )  # fmt: skip


def _block_outputs(
    ops, under, over, zero_block, clamped_low, clamped_high, scales, n_scales, top, signal, error
):
    """The outputs of ``_block_format`` from its per-value and per-block arrays."""
    per_value = [x.reshape(-1) for x in (under, over, signal * signal, error * error)]
    per_block = [x.reshape(-1) for x in (zero_block, clamped_low, clamped_high)]
    under, over, signal, error = ops.fold([("sum", x, 0) for x in per_value])
    zeros, low, high = ops.fold([("sum", x, 0) for x in per_block])
    histogram = ops.bincount(scales.reshape(-1), n_scales + 1)[:n_scales]
    return [under, over], [zeros, low, high, histogram], [top, signal, error]


def _by_sign(ops, negative, positive_value: int, negative_value: int):
    """The threshold for each value's sign (a constant where both are the same)."""
    if positive_value == negative_value:
        return positive_value
    return ops.where(negative, negative_value, positive_value)


def _zero_overflows(thresholds: list[list[int]]) -> list[int]:
    """Per element format and per count (under, over): 1 where 0 itself overflows (counted
    once per zero, as an overflow; the last column of ``threshold_bits``)."""
    return [flag for t in thresholds for flag in (0, t[-1])]
