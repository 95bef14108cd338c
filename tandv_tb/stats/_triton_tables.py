"""Every constant the Triton kernels read, gathered in one place (``kernel_tables``).

The kernels (``_triton_kernel``) hold no numeric literal of a format: the source dtype's bit
layout, the element formats' cast thresholds and the block formats' rows
(``formats.kernel_tables``, as the other kernels read them), nvfp4's constants and MX's
scale range (``formats.blocks``) and the positions of every output in the
engine's vectors (``tensor_stats.engine_layout``) reach them from here, as compile-time
constants (a kernel is compiled once per dtype and set of formats).

Outputs. Per tensor the kernels fill one int64 vector, ``packed_length`` long: the engine's
counts vector, then its moments vector as float64 bit patterns (``TensorStats.unpack`` of
the two halves). Meanwhile they keep, per tensor, a *counts row* in a workspace (the
counts vector, then three extremes, added to with integer atomics and left zeroed by the
finalize kernel) and, per program, a *moments row* (``PART_FIELDS``, then one squared-error
sum per block format).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import ml_dtypes
import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.event_files.record import COUNTS
from tandv_tb.formats import blocks as block_formats
from tandv_tb.formats.kernel_tables import block_table, threshold_bits
from tandv_tb.stats.tensor_stats import BLOCK_COUNTS, BLOCK_MOMENTS, MOMENTS, engine_layout

#: The dtypes the Triton kernels read (through their integer bit patterns).
DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
#: A program's moments row: the unit exponent of its sums (``NO_UNIT`` before any finite
#: non-zero value), its finite values, then sums of s, |s|, s**2, s**4, s**8 and the
#: squares about its own mean, s being x / 2**unit; then each block format's squared
#: errors (nvfp4's in the tensor's unit, the others in the program's).
PART_FIELDS = ("unit", "finite", "sum_s", "sum_abs_s", "sum_s2", "sum_s4", "sum_s8", "m2_s")
#: Extremes kept after the counts in a workspace row: the largest finite |x| and, as
#: ``FLOAT32_INF - bits`` so that the workspace's zero means "none", the smallest finite
#: |x| and the smallest non-zero one (float32 bit patterns).
EXTREMES = ("max_bits", "inverse_min_bits", "inverse_min_nonzero_bits")
#: An element format's six thresholds read by the kernel (``threshold_bits``'s first six
#: columns; the seventh, 0 itself overflowing, is applied by the finalize kernel).
THRESHOLDS = 6
#: Fields of an MX format's row for the main kernel (``mx`` below).
MX_FIELDS = 8


@dataclasses.dataclass(frozen=True)
class KernelTables:
    """The compile-time constants of the kernels for one dtype and tuple of formats."""

    dtype: str
    formats: tuple[str, ...]
    # The source dtype's bit layout: bits, explicit mantissa bits, exponent bias, the
    # first non-finite magnitude pattern, +Inf's pattern (-1 where it has none).
    src_bits: int
    src_mant: int
    src_bias: int
    finite_below: int
    inf_bits: int
    # The histogram: lowest exponent, keys (COUNTS' slots and the bins), a power of two.
    hist_lo: int
    n_keys: int
    keys_p2: int
    # Element formats: THRESHOLDS per format, flat; the counts' slots of the formats
    # whose 0 overflows (each adds the zeros once more).
    elements: tuple[int, ...]
    zero_overflow_slots: tuple[int, ...]
    # MX formats: MX_FIELDS per format, flat: rule, emax, emin, mantissa bits, largest
    # mantissa, lowest scale exponent, scale exponents, moments-row slot of its errors.
    mx: tuple[int, ...]
    mx_scale_slots: tuple[int, ...]  # where its blocks per scale exponent start
    scales_p2: int
    # Counters the main kernel adds per program, and where each goes in a counts row.
    small_slots: tuple[int, ...]
    small_p2: int
    # nvfp4 (empty where not asked): emax, emin, mantissa bits, largest mantissa, lowest
    # scale exponent, scale exponents, moments-row slot; and its counts' slots: under,
    # over, zero blocks, clamped low, clamped high, first scale exponent.
    nvfp4: tuple[int, ...]
    nvfp4_slots: tuple[int, ...]
    # nvfp4's float32 constants: the element's largest value, the per-tensor divisor,
    # the block scales' clamp, the scale format's dropped mantissa bits.
    nvfp4_element_max: float
    nvfp4_divisor: float
    nvfp4_lowest: float
    nvfp4_highest: float
    nvfp4_scale_drop: int
    # Values per block: MX formats' (None where none is asked) and nvfp4's.
    mx_block: int | None
    nvfp4_block: int | None
    # MX's scale exponent range (E8M0).
    mx_scale_min: int
    mx_scale_max: int
    # The engine's vectors: lengths, and per block format its (exponent, signal, error)
    # slots in the moments vector and whether its errors are in the program's unit.
    n_counts: int
    n_moments: int
    block_moment_slots: tuple[int, ...]
    block_in_program_unit: tuple[int, ...]
    # The workspace's counts row and a program's moments row.
    workspace_width: int
    part_width: int

    @property
    def packed_length(self) -> int:
        return self.n_counts + self.n_moments

    @property
    def has_blocks(self) -> bool:
        return self.mx_block is not None or self.nvfp4_block is not None


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def _uint(bits: int):
    return {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]


@functools.cache
def source_layout(dtype: str) -> tuple[int, int, int, int, int]:
    """(bits, mantissa bits, bias, first non-finite magnitude pattern, +Inf's pattern or -1)
    of a dtype, from ml_dtypes."""
    numpy_dtype = fmt.numpy_dtype(dtype)
    fi = ml_dtypes.finfo(numpy_dtype)
    bits = int(fi.bits)
    largest = int(np.array([fi.max], numpy_dtype).view(_uint(bits))[0])
    with np.errstate(over="ignore", invalid="ignore"):
        inf = int(np.array([np.inf], np.float32).astype(numpy_dtype).view(_uint(bits))[0])
    has_inf = fmt.info(dtype).has_inf
    return bits, int(fi.nmant), 1 - int(fi.minexp), largest + 1, inf if has_inf else -1


@functools.cache
def kernel_tables(dtype: str, formats: tuple[str, ...]) -> KernelTables:
    """The kernels' constants for tensors of ``dtype`` (one of ``DTYPES``) and the canonical
    ``formats`` (``formats.check_formats``)."""
    info = fmt.info(dtype)
    n_counts, n_moments = engine_layout(dtype, formats)
    casts = len(COUNTS) + info.n_bins
    thresholds = threshold_bits(dtype, formats, False)  # one row per element format
    n_elements = len(thresholds)
    small_slots: list[int] = []
    for i in range(n_elements):
        small_slots += [casts + 2 * i, casts + 2 * i + 1]
    zero_overflow = tuple(casts + 2 * i + 1 for i in range(n_elements) if thresholds[i, 6])

    table = block_table(dtype, formats)  # one row per block format
    sizes = {int(row[0] == block_formats.NVFP4): int(row[1]) for row in table.tolist()}
    nvfp4_element_max = 0.0
    mx: list[int] = []
    mx_scale_slots: list[int] = []
    nvfp4: tuple[int, ...] = ()
    nvfp4_slots: tuple[int, ...] = ()
    block_moment_slots: list[int] = []
    in_program_unit: list[int] = []
    at = casts + 2 * len(formats)
    for k, row in enumerate(table.tolist()):
        rule, _, emax, emin, mant, max_mant, scale_lo, n_scales = row
        pair = casts + 2 * (n_elements + k)
        fields = at  # zero blocks, clamped low, clamped high, then the scale exponents
        slot = len(PART_FIELDS) + k
        if rule == block_formats.NVFP4:
            nvfp4 = (emax, emin, mant, max_mant, scale_lo, n_scales, slot)
            nvfp4_slots = (pair, pair + 1, fields, fields + 1, fields + 2, fields + 3)
            nvfp4_element_max = block_formats.NVFP4_ELEMENT_MAX
        else:
            mx += [rule, emax, emin, mant, max_mant, scale_lo, n_scales, slot]
            mx_scale_slots.append(fields + len(BLOCK_COUNTS))
            small_slots += [pair, pair + 1, fields, fields + 1, fields + 2]
        block_moment_slots.append(len(MOMENTS) + len(BLOCK_MOMENTS) * k)
        in_program_unit.append(int(rule != block_formats.NVFP4))
        at += len(BLOCK_COUNTS) + n_scales

    bits, mant, bias, finite_below, inf_bits = source_layout(dtype)
    return KernelTables(
        dtype=dtype,
        formats=formats,
        src_bits=bits,
        src_mant=mant,
        src_bias=bias,
        finite_below=finite_below,
        inf_bits=inf_bits,
        hist_lo=info.min_exponent,
        n_keys=casts,
        keys_p2=_next_power_of_two(casts),
        elements=tuple(int(v) for v in thresholds[:, :THRESHOLDS].reshape(-1)),
        zero_overflow_slots=zero_overflow,
        mx=tuple(mx),
        mx_scale_slots=tuple(mx_scale_slots),
        scales_p2=_next_power_of_two(max(mx[6::MX_FIELDS], default=1)),
        small_slots=tuple(small_slots),
        small_p2=_next_power_of_two(len(small_slots)),
        nvfp4=nvfp4,
        nvfp4_slots=nvfp4_slots,
        nvfp4_element_max=nvfp4_element_max,
        nvfp4_divisor=float(block_formats.NVFP4_TENSOR_DIVISOR),
        nvfp4_lowest=math.ldexp(1.0, block_formats.NVFP4_SCALE_MIN),
        nvfp4_highest=float(block_formats.NVFP4_SCALE_MAX),
        nvfp4_scale_drop=int(np.finfo(np.float32).nmant) - block_formats.NVFP4_SCALE_MANTISSA_BITS,
        mx_block=sizes.get(0),
        nvfp4_block=sizes.get(1),
        mx_scale_min=block_formats.MX_SCALE_MIN,
        mx_scale_max=block_formats.MX_SCALE_MAX,
        n_counts=n_counts,
        n_moments=n_moments,
        block_moment_slots=tuple(block_moment_slots),
        block_in_program_unit=tuple(in_program_unit),
        workspace_width=n_counts + len(EXTREMES),
        part_width=len(PART_FIELDS) + len(table),
    )
