"""``BlockFormat``: the block-scaled formats, OCP Microscaling (MX) v1.0 and NVIDIA's
NVFP4, and their constants (the one definition every kernel reads, ``kernel_tables``).

A tensor is cut into blocks of consecutive values along its last dimension (32 for MX, 16
for nvfp4; a row whose length is not a multiple of the block ends with a shorter block; a
0-d or 1-d tensor is one row). Each block shares one scale; each value is divided by it
and rounded to the element format, to nearest, ties to even, saturating at its largest
finite value. NaN and Inf take no part in a block's largest magnitude ``amax`` or in any
count.

- **MX** (``mxfp8_e4m3``, ``mxfp8_e5m2``, ``mxfp6_e3m2``, ``mxfp6_e2m3``, ``mxfp4_e2m1``):
  the scale is ``2**X`` with ``X = floor(log2(amax)) - emax`` (OCP v1.0; ``emax`` is the
  element's largest exponent), clipped to ``-127 .. 127``; a block with no finite non-zero
  value gets ``2**-127``. This is gfloat's ``quantize_block`` with ``compute_scale_amax``.
- **MX with the suffix ``:rceil``** (for example ``mxfp8_e4m3:rceil``): NVIDIA's hardware
  rule, the scale rounded up: ``X = ceil(log2(amax / max))`` (``max`` the element's largest
  value), the smallest power of two at which no value of the block saturates; clipped
  likewise. It is recorded under its own name, beside the plain one if both are asked.
- **nvfp4**: NVIDIA's two-level recipe, as torchao's ``nvfp4_quantize`` computes it with
  ``per_tensor_scale = amax(tensor) / (448 * 6)``, in float32 arithmetic: E2M1 elements, a
  ``float8_e4m3fn`` scale per block of 16 (``amax / 6 / per_tensor_scale``, clamped to
  ``2**-6 .. 448`` and rounded to E4M3), values multiplied by ``(1 / per_tensor_scale) /
  block_scale``. float64 values are rounded to float32 first, as torchao's ``.float()``,
  saturating at float32's largest value (so that the arithmetic stays finite).

A format's *scale exponent* is ``X`` for MX and ``floor(log2)`` of the E4M3 block scale for
nvfp4. A block *clamps* low or high where the rule's scale lies below or above the scale's
range (MX: ``2**-127 .. 2**127``; nvfp4: ``2**-6 .. 448``); blocks with no finite non-zero
value are counted apart (``zero_blocks``) and not as clamped.
"""

from __future__ import annotations

import functools
import math

import ml_dtypes

from tandv_tb.formats.base import BLOCKS, CAST_METRICS, Format

#: The scale rules, as the kernels number them (``kernel_tables.block_table``).
FLOOR, RCEIL, NVFP4 = 0, 1, 2
#: The suffix that selects NVIDIA's round-up scale rule for an MX format.
RCEIL_SUFFIX = ":rceil"
#: Values per block: MX's and nvfp4's; the array's blocks of a kernel begin on a multiple
#: of the largest.
MX_BLOCK, NVFP4_BLOCK = 32, 16
LARGEST_BLOCK, SMALLEST_BLOCK = max(MX_BLOCK, NVFP4_BLOCK), min(MX_BLOCK, NVFP4_BLOCK)
#: MX scale exponents lie in this range (E8M0).
MX_SCALE_MIN, MX_SCALE_MAX = -127, 127

_E4M3 = ml_dtypes.finfo(ml_dtypes.float8_e4m3fn)
#: nvfp4's block scales are E4M3 values clamped to [2**NVFP4_SCALE_MIN, NVFP4_SCALE_MAX]
#: (E4M3's normal range), with NVFP4_SCALE_MANTISSA_BITS explicit mantissa bits.
NVFP4_SCALE_MIN, NVFP4_SCALE_MAX = int(_E4M3.minexp), float(_E4M3.max)
NVFP4_SCALE_MANTISSA_BITS = int(_E4M3.nmant)

_ELEMENTS = {
    "mxfp8_e4m3": "float8_e4m3fn",
    "mxfp8_e5m2": "float8_e5m2",
    "mxfp6_e3m2": "float6_e3m2fn",
    "mxfp6_e2m3": "float6_e2m3fn",
    "mxfp4_e2m1": "float4_e2m1fn",
    "nvfp4": "float4_e2m1fn",
}
#: The block formats' base names, in the order the docs list them.
NAMES = tuple(_ELEMENTS)
#: The block formats as a message lists them.
NAMES_TEXT = f"{', '.join(NAMES)}, or an MX one with {RCEIL_SUFFIX!r}"
#: The scale rules as the routes name them.
RULE_NAMES = {FLOOR: "ocp", RCEIL: "rceil", NVFP4: "nvfp4"}


class BlockFormat(Format):
    """One block-scaled format: its element format and scale rule.

    ``emax``/``emin`` are the element's largest and smallest normal exponents,
    ``mantissa_bits`` its explicit mantissa bits and ``max`` its largest finite value,
    ``max_mantissa * 2**(emax - mantissa_bits)``.
    """

    section = BLOCKS
    columns = (
        "underflow",
        "overflow",
        "zero_blocks",
        "clamped_low",
        "clamped_high",
        "total_blocks",
        "exponent",
        "signal",
        "error",
    )
    metrics = (*CAST_METRICS, "snr_db", "clamped_block_fraction")
    estimable = False
    scales_itself = True
    saturates = True

    element: str
    block_size: int
    rule: int
    emax: int
    emin: int
    mantissa_bits: int
    max_mantissa: int

    @classmethod
    def of(cls, name: str) -> BlockFormat:
        return block_format(name)

    @property
    def max(self) -> float:
        return math.ldexp(self.max_mantissa, self.emax - self.mantissa_bits)

    @property
    def rule_name(self) -> str:
        """The scale rule as the routes name it: ``ocp``, ``rceil`` or ``nvfp4``."""
        return RULE_NAMES[self.rule]

    @property
    def scale_exponents(self) -> tuple[int, int]:
        """The lowest and highest scale exponents a block can get: its scales' range,
        where the blocks that clamp lie (MX: E8M0's; nvfp4: E4M3's normal binades)."""
        if self.rule == NVFP4:
            return NVFP4_SCALE_MIN, math.floor(math.log2(NVFP4_SCALE_MAX))
        return MX_SCALE_MIN, MX_SCALE_MAX

    @property
    def round_up(self) -> str | None:
        """The same format under NVIDIA's round-up rule, which saturates no value (None
        where this is it, or nvfp4)."""
        return f"{self}{RCEIL_SUFFIX}" if self.rule == FLOOR else None

    @property
    def high_clamps_lose(self) -> bool:
        """Whether a block whose scale clamps high loses values. Not nvfp4's: its per-tensor
        scale maps the block holding the tensor's largest value to E4M3's largest exactly
        in real arithmetic, and float32 can put that one ulp over (torchao's clamp then
        takes it back)."""
        return self.rule != NVFP4

    def scale_range(self, dtype_min_exponent: int, dtype_max_exponent: int) -> tuple[int, int]:
        """(lowest scale exponent, number of them) that blocks of values whose exponents lie
        in ``dtype_min_exponent .. dtype_max_exponent`` can get (zero blocks aside)."""
        if self.rule == NVFP4:
            lowest, highest = self.scale_exponents
            return lowest, highest - lowest + 1
        lo = _clip(dtype_min_exponent - self.emax)
        hi = _clip(dtype_max_exponent - self.emax + (1 if self.rule == RCEIL else 0))
        return lo, hi - lo + 1

    def kernel_row(self, dtype_min_exponent: int, dtype_max_exponent: int) -> tuple[int, ...]:
        """The kernels' description (``kernel_tables.BLOCK_ROW``): rule, block size, emax,
        emin, mantissa bits, max mantissa, lowest scale exponent, number of scale
        exponents."""
        lo, n = self.scale_range(dtype_min_exponent, dtype_max_exponent)
        return (
            self.rule,
            self.block_size,
            self.emax,
            self.emin,
            self.mantissa_bits,
            self.max_mantissa,
            lo,
            n,
        )

    def not_recorded(self, where: str) -> str:
        """Why this format, not recorded for ``where`` (what was asked of), is not shown: it
        cannot be estimated."""
        return (
            f"{self} was not recorded for {where}: a block-scaled format cannot be estimated "
            f"from the exponent histogram (the blocks are gone); give {str(self)!r} to "
            "formats= when tracking"
        )


def _clip(exponent: int) -> int:
    return max(MX_SCALE_MIN, min(MX_SCALE_MAX, exponent))


def is_block_format(name: object) -> bool:
    """Whether ``name`` names a block-scaled format (no check of the rest)."""
    return isinstance(name, str) and name.split(":", 1)[0] in _ELEMENTS


def block_format(name: str) -> BlockFormat:
    """The block format named ``name`` (``ValueError`` for another name or a bad suffix):
    one value per name."""
    return _block_format(str(name))


@functools.cache
def _block_format(name: str) -> BlockFormat:
    base, _, suffix = name.partition(":")
    if base not in _ELEMENTS or (suffix and (suffix != RCEIL_SUFFIX[1:] or base == "nvfp4")):
        raise ValueError(
            f"unknown block format {name!r}: expected one of {', '.join(NAMES)}, or an MX "
            f"name with {RCEIL_SUFFIX!r} for NVIDIA's round-up scale rule "
            "(e.g. 'mxfp8_e4m3:rceil')"
        )
    element = _ELEMENTS[base]
    info = ml_dtypes.finfo(getattr(ml_dtypes, element))
    mantissa_bits = int(info.nmant)
    emax = int(info.maxexp) - 1
    return BlockFormat._made(
        name,
        element=element,
        block_size=NVFP4_BLOCK if base == "nvfp4" else MX_BLOCK,
        rule=NVFP4 if base == "nvfp4" else (RCEIL if suffix else FLOOR),
        emax=emax,
        emin=int(info.minexp),
        mantissa_bits=mantissa_bits,
        max_mantissa=int(math.ldexp(float(info.max), mantissa_bits - emax)),
    )


def with_rules() -> tuple[BlockFormat, ...]:
    """Every block format: the base names, then the MX ones with ``:rceil``."""
    bases = [block_format(n) for n in NAMES]
    return (*bases, *(block_format(b.round_up) for b in bases if b.round_up))


_NVFP4 = block_format("nvfp4")
#: nvfp4's element (E2M1): its smallest and largest normal exponents, explicit mantissa
#: bits, largest mantissa and largest value.
NVFP4_EMIN, NVFP4_EMAX = _NVFP4.emin, _NVFP4.emax
NVFP4_MANTISSA_BITS, NVFP4_MAX_MANTISSA = _NVFP4.mantissa_bits, _NVFP4.max_mantissa
NVFP4_ELEMENT_MAX = _NVFP4.max
#: nvfp4's per-tensor scale is amax / NVFP4_TENSOR_DIVISOR (E4M3's max times E2M1's).
NVFP4_TENSOR_DIVISOR = NVFP4_SCALE_MAX * NVFP4_ELEMENT_MAX
