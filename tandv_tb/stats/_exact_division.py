"""Correctly rounded float32 division out of integer operations, for jax on accelerators.

nvfp4's scales are defined by float32 divisions rounded to nearest even
(``tandv_tb.formats.blocks``).
XLA's GPU backend divides float32 with an approximate instruction (``div.full.f32``: about
one in four quotients one ulp off; openxla/xla#37181), and a quotient one ulp off moves a
block's scale across 448 or across an E4M3 rounding boundary. So the array kernel divides
float32 here, by long division of the integer significands, which every backend computes
exactly. It is used for the few divisions per block, never per value.
"""

from __future__ import annotations

_MANTISSA = 23
_BIAS = 127
_HIDDEN = 1 << _MANTISSA
_GUARD = 2  # quotient bits kept below the result's last bit (with a sticky bit)
_INF, _NAN = 0x7F800000, 0x7FC00000


def _significand(jnp, lax, bits):
    """(significand with its leading bit at 2**23, exponent) of positive finite float32
    bit patterns: the value is significand * 2**(exponent - 127 - 23)."""
    field = bits >> _MANTISSA
    fraction = bits & (_HIDDEN - 1)
    # A subnormal's leading bit moves up to 2**23; its exponent goes down as far.
    shift = jnp.where(field == 0, lax.clz(fraction | 1) - (31 - _MANTISSA), 0).astype(bits.dtype)
    significand = jnp.where(field == 0, fraction << shift, fraction | _HIDDEN)
    exponent = jnp.where(field == 0, 1 - shift.astype(jnp.int32), field.astype(jnp.int32))
    return significand, exponent


def divide_float32(jnp, lax, a, b):
    """``a / b`` for float32 arrays, rounded to nearest even as IEEE 754 defines it,
    subnormal quotients, overflow to infinity and the special values included. Only
    integer operations: a device that flushes subnormals (XLA's CPU) flushes none here."""
    ua = lax.bitcast_convert_type(a, jnp.uint32)
    ub = lax.bitcast_convert_type(b, jnp.uint32)
    sign = (ua ^ ub) & jnp.uint32(1 << 31)
    ua, ub = ua & jnp.uint32(0x7FFFFFFF), ub & jnp.uint32(0x7FFFFFFF)
    ma, ea = _significand(jnp, lax, ua)
    mb, eb = _significand(jnp, lax, ub)
    # Numerator in [mb, 2 mb): the quotient's leading bit is its first bit.
    below = ma < mb
    remainder = jnp.where(below, ma << 1, ma)
    exponent = ea - eb - below.astype(jnp.int32) + _BIAS  # the quotient's biased exponent
    quotient = jnp.zeros_like(ua)
    for _ in range(_MANTISSA + 1 + _GUARD):
        bit = remainder >= mb
        quotient = (quotient << 1) | bit.astype(jnp.uint32)
        remainder = (remainder - jnp.where(bit, mb, 0)) << 1
    sticky = remainder != 0
    # Bits to drop: the guard bits, and as many more as a subnormal quotient lacks.
    drop = _GUARD + jnp.clip(1 - exponent, 0, _MANTISSA + _GUARD + 1).astype(jnp.uint32)
    kept = quotient >> drop
    rest = quotient - (kept << drop)
    half = jnp.uint32(1) << (drop - 1)
    up = (rest > half) | ((rest == half) & (sticky | ((kept & 1) == 1)))
    kept = kept + up.astype(jnp.uint32)
    # A carry out of the significand lands in the exponent field, as it should.
    field = jnp.maximum(exponent, 1) - 1
    magnitude = (field.astype(jnp.uint32) << _MANTISSA) + kept
    magnitude = jnp.where(exponent >= 255, jnp.uint32(_INF), magnitude)
    # The special values, told apart by their bit patterns.
    nan = (ua > _INF) | (ub > _INF) | ((ua == 0) & (ub == 0)) | ((ua == _INF) & (ub == _INF))
    infinite = (ua == _INF) | (ub == 0)
    zero = (ua == 0) | (ub == _INF)
    magnitude = jnp.where(infinite, jnp.uint32(_INF), jnp.where(zero, 0, magnitude))
    magnitude = jnp.where(nan, jnp.uint32(_NAN), magnitude)
    return lax.bitcast_convert_type(magnitude | sign, jnp.float32)
