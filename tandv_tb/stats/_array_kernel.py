"""The array-library kernel: branch-free, for accelerators and for code under ``jax.jit``.

Written once over a tiny adapter (``TorchOps``, ``JaxOps``): nothing here reads a value back
to the host, so it runs asynchronously on a GPU and traces under ``jax.jit``. The exponent
comes from the bit pattern: ``bits >> mantissa_bits`` for normal numbers, and for a
subnormal from its integer mantissa converted to a float, so one ``bincount`` counts every
bin, the zeros (key 0) and the non-finite values (last key) at once. Outputs follow
``record.engine_layout``.
"""

from __future__ import annotations

import math

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.stats._cpu_kernel import threshold_bits

_LAYOUT = {
    # compute dtype: (mantissa bits, exponent bias, all-ones exponent field)
    "float32": (23, 127, 255),
    "float64": (52, 1023, 2047),
}


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
        return self.t.bincount(keys, minlength=length)

    def clip(self, x, low, high):
        return self.t.clamp(x, low, high)

    def where(self, cond, a, b):
        return self.t.where(cond, a, b)

    def count(self, cond):
        return cond.sum()

    def stack_counts(self, parts):
        return self.t.cat([self.t.as_tensor(p).reshape(-1).to(self.t.int64) for p in parts])

    def stack_moments(self, parts):
        return self.t.stack([p.to(self.t.float64) for p in parts])

    def scalar_like(self, value, like):
        return self.t.tensor(value, dtype=like.dtype, device=like.device)

    def numel(self, x, like):
        return self.t.tensor(x, dtype=self.t.int64, device=like.device)


class JaxOps:
    """The same operations for jax arrays (traceable under ``jax.jit``)."""

    def __init__(self):
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        wide = jax.config.jax_enable_x64
        self.int_dtype = jnp.int64 if wide else jnp.int32
        self.float_dtype = jnp.float64 if wide else jnp.float32

    def int_view(self, x):
        return self.jax.lax.bitcast_convert_type(
            x, self.jnp.int64 if x.dtype == self.jnp.float64 else self.jnp.int32
        )

    def float_view(self, bits, like):
        return self.jax.lax.bitcast_convert_type(bits, like.dtype)

    def to_float(self, ints, like):
        return ints.astype(like.dtype)

    def bincount(self, keys, length):
        return self.jnp.bincount(keys, length=length)

    def clip(self, x, low, high):
        return self.jnp.clip(x, low, high)

    def where(self, cond, a, b):
        return self.jnp.where(cond, a, b)

    def count(self, cond):
        return self.jnp.sum(cond, dtype=self.int_dtype)

    def stack_counts(self, parts):
        return self.jnp.concatenate(
            [self.jnp.reshape(self.jnp.asarray(p), (-1,)).astype(self.int_dtype) for p in parts]
        )

    def stack_moments(self, parts):
        return self.jnp.stack([self.jnp.asarray(p).astype(self.float_dtype) for p in parts])

    def scalar_like(self, value, like):
        return self.jnp.asarray(value, dtype=like.dtype)

    def numel(self, x, like):
        return self.jnp.asarray(x, dtype=self.int_dtype)


def compute_arrays(ops, values, dtype: str, formats: tuple[str, ...]):
    """Counts and moments of ``values`` (flat, float32 or float64, widened from ``dtype``).

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
    info = fmt.info(dtype)
    numel = math.prod(values.shape)

    signed_bits = ops.int_view(values)
    negative = signed_bits < 0
    magnitude = signed_bits & sign_mask
    field = magnitude >> mant_bits
    finite = field != all_ones
    nonzero = magnitude != 0
    # A subnormal's bits are its integer mantissa m; as a float m is normal and exact, and
    # its exponent field gives floor(log2 m). Key 0 holds zeros, the last key non-finites.
    mantissa_field = ops.int_view(ops.to_float(magnitude, values)) >> mant_bits
    subnormal_keys = ops.where(nonzero, mantissa_field - bias + 2, 0)
    keys = ops.where(field == 0, subnormal_keys, field + shift)
    bins = ops.bincount(keys, all_ones + shift + 1)
    first = info.min_exponent + bias + shift
    hist = bins[first : first + info.n_bins]
    zero = bins[0]
    nan = ops.count(magnitude > inf_bits)
    posinf = ops.count(signed_bits == inf_bits)
    neginf = ops.count(signed_bits == inf_bits - sign_mask - 1)

    inf_bits_array = ops.scalar_like(inf_bits, magnitude)
    max_bits = ops.where(finite, magnitude, 0 * magnitude).max() if numel else 0 * inf_bits_array
    min_bits = ops.where(finite, magnitude, inf_bits_array).min() if numel else inf_bits_array
    min_nonzero_bits = (
        ops.where(finite & nonzero, magnitude, inf_bits_array).min() if numel else inf_bits_array
    )
    max_abs, min_abs, min_nonzero = (
        ops.float_view(b, values) for b in (max_bits, min_bits, min_nonzero_bits)
    )

    # s = x * 2**-e with 2**e near max|x|: exact, and no reciprocal underflows (XLA turns a
    # division into one, and flushes subnormals). When every finite value is subnormal,
    # their integer mantissas (normal floats with the same ratios) are scaled instead.
    max_field = max_bits >> mant_bits
    tiny = max_field == 0
    top_mantissa = (ops.int_view(ops.to_float(max_bits, values)) >> mant_bits) - bias
    e_tiny = ops.where(max_bits == 0, 0 * max_field, top_mantissa)
    e_normal = ops.clip(max_field - bias, 1 - bias, bias - 1)
    inverse = ops.float_view(ops.where(tiny, bias - e_tiny, bias - e_normal) << mant_bits, values)
    one_bits = ops.scalar_like(bias << mant_bits, magnitude)
    scale_bits = ops.where(
        max_bits == 0,
        one_bits,
        ops.where(tiny, ops.scalar_like(1, magnitude) << e_tiny, (bias + e_normal) << mant_bits),
    )
    scale = ops.float_view(scale_bits, values)
    signed_mantissas = ops.where(negative, -1.0, 1.0) * ops.to_float(magnitude, values)
    numerators = ops.where(tiny, signed_mantissas, values)
    zero_f = 0.0 * inverse
    scaled = ops.where(finite, numerators, zero_f) * inverse
    finite_count = numel - bins[-1]
    mean_s = scaled.sum() / ops.where(finite_count > 0, finite_count, 1)
    centred = ops.where(finite, scaled - mean_s, zero_f)
    square = scaled * scaled
    fourth = square * square

    casts = []
    for name in formats:
        t = threshold_bits(dtype, (name,), wide)[0].tolist()
        positive_nonzero = ~negative & nonzero & finite
        negative_nonzero = negative & nonzero & finite
        under = ops.count(positive_nonzero & (magnitude <= t[0])) + ops.count(
            negative_nonzero & (magnitude <= t[1])
        )
        over = ops.count(positive_nonzero & ((magnitude >= t[2]) | (magnitude < t[4]))) + ops.count(
            negative_nonzero & ((magnitude >= t[3]) | (magnitude < t[5]))
        )
        casts += [under, over + zero * t[6]]

    counts = ops.stack_counts([ops.numel(numel, values), zero, nan, posinf, neginf, hist, *casts])
    moments = ops.stack_moments(
        [
            scale,
            scaled.sum(),
            abs(scaled).sum(),
            square.sum(),
            fourth.sum(),
            (fourth * fourth).sum(),
            (centred * centred).sum(),
            max_abs,
            min_abs,
            min_nonzero,
        ]
    )
    return counts, moments
