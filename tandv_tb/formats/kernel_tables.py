"""What a kernel reads of the formats: small int64 tables made from the format values, one
row per format, in the order of ``formats`` (``check_formats``: element formats first).

Every kernel (the compiled CPU kernel, the array kernel, the XLA FFI call, and any new
one) takes the formats' constants from here or from ``blocks``' module constants, never
from a literal of its own:

- ``threshold_bits(dtype, formats, wide)``: per element format of ``formats``, its exact
  cast thresholds from ``dtype`` (``thresholds.CastThresholds``) as bit patterns of the
  compute dtype (float32, or float64 where ``wide``), columns ``THRESHOLD_ROW``;
- ``block_table(dtype, formats)``: per block format of ``formats``, its rule, block size,
  element and scale range for values of ``dtype``, columns ``BLOCK_ROW``
  (``BlockFormat.kernel_row``);
- the constants of the scale rules, for code that must have them at compile time (numba,
  Triton): ``blocks.FLOOR``, ``RCEIL``, ``NVFP4``; ``MX_BLOCK``, ``NVFP4_BLOCK``,
  ``LARGEST_BLOCK``, ``SMALLEST_BLOCK``; ``MX_SCALE_MIN``/``MX_SCALE_MAX``; nvfp4's block
  scale (``NVFP4_SCALE_MIN``, ``NVFP4_SCALE_MAX``, ``NVFP4_SCALE_MANTISSA_BITS``: E4M3),
  its element (``NVFP4_EMIN``, ``NVFP4_EMAX``, ``NVFP4_MANTISSA_BITS``,
  ``NVFP4_MAX_MANTISSA``, ``NVFP4_ELEMENT_MAX``: E2M1) and ``NVFP4_TENSOR_DIVISOR``.

The tables are cached and read-only.
"""

from __future__ import annotations

import functools

import numpy as np

from tandv_tb.formats.dtypes import gradual_underflow, info
from tandv_tb.formats.names import split_formats

#: The columns of ``threshold_bits``: ``CastThresholds``' fields, the last 1 where 0 itself
#: overflows.
THRESHOLD_ROW = (
    "under_pos",
    "under_neg",
    "over_pos",
    "over_neg",
    "nan_below_pos",
    "nan_below_neg",
    "zero_overflows",
)
#: The columns of ``block_table`` (``BlockFormat.kernel_row``).
BLOCK_ROW = (
    "rule",
    "block_size",
    "emax",
    "emin",
    "mantissa_bits",
    "max_mantissa",
    "scale_lo",
    "n_scales",
)


@functools.cache
def threshold_bits(dtype: str, formats: tuple[str, ...], wide: bool) -> np.ndarray:
    """The cast thresholds from ``dtype`` of the element formats among ``formats``, as bit
    patterns of the compute dtype (float32, or float64 when ``wide``), int64
    [formats, ``THRESHOLD_ROW``]."""
    compute = (np.float64, np.int64) if wide else (np.float32, np.int32)
    elements = split_formats(formats)[0]
    table = np.zeros((len(elements), len(THRESHOLD_ROW)), np.int64)
    with gradual_underflow():
        for row, element in enumerate(elements):
            values = element.thresholds(dtype).as_row()
            table[row, :-1] = np.array(values[:-1], dtype=compute[0]).view(compute[1])
            table[row, -1] = int(values[-1])
    table.flags.writeable = False
    return table


@functools.cache
def block_table(dtype: str, formats: tuple[str, ...]) -> np.ndarray:
    """The block formats among ``formats`` for values of ``dtype``, int64 [formats,
    ``BLOCK_ROW``]."""
    dtype_info = info(dtype)
    rows = [
        block.kernel_row(dtype_info.min_exponent, dtype_info.max_exponent)
        for block in split_formats(formats)[1]
    ]
    table = np.array(rows, dtype=np.int64).reshape(len(rows), len(BLOCK_ROW))
    table.flags.writeable = False
    return table
