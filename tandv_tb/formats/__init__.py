"""Number formats: every fact of a dtype or a low-precision format, in one package that
imports nothing else of tandv_tb.

A *format* is a value (``base.Format``) made once from its name by ``check_formats`` (what
``formats=`` takes) or ``as_format`` (one name, from a route or a file). It is its
canonical name, a ``str``, so it goes wherever a name goes; and it knows its kind and
constants, so the layers above ask it instead of testing the kind:

- ``ElementFormat`` (``element``): a format each value is cast to on its own, any name
  ``ml_dtypes.finfo`` accepts; ``info`` (``dtypes.FormatInfo``) and ``thresholds(source)``
  (``thresholds.CastThresholds``, found with ml_dtypes' own casts).
- ``BlockFormat`` (``blocks``): MX (with ``:rceil``, NVIDIA's round-up scale rule) and
  nvfp4; its element, block size, scale rule, scale range and nvfp4's constants.
- Both say ``section`` (the record's section and the store's table holding their counts:
  ``CASTS`` or ``BLOCKS``), ``columns`` (what each record holds for them there),
  ``metrics`` (what the routes can show of them), ``estimable`` (estimated from the
  exponent histogram where not recorded: ``estimate``), ``scales_itself`` and
  ``saturates`` (what the findings say of them).

``split_formats`` parts formats by kind, for the layouts that keep the kinds apart (the
engine's vectors, a record's sections). ``kernel_tables`` makes the tables every kernel
reads (``threshold_bits``, ``block_table``); ``blocks`` holds the scale rules' constants
for code compiled with them.

Modules, from the bottom up: ``dtypes``, ``thresholds``, ``base``, ``element``, ``blocks``,
``names``, ``kernel_tables``, ``estimate``.
"""

from tandv_tb.formats.base import BLOCKS, CASTS, Format
from tandv_tb.formats.blocks import BlockFormat, block_format
from tandv_tb.formats.dtypes import (
    DEFAULT_OVERLAYS,
    FormatInfo,
    canonical_name,
    gradual_underflow,
    info,
    numpy_dtype,
)
from tandv_tb.formats.element import ElementFormat, element_format
from tandv_tb.formats.names import as_format, check_formats, split_formats
from tandv_tb.formats.thresholds import CastThresholds, cast_array, cast_thresholds

__all__ = [
    "BLOCKS",
    "CASTS",
    "DEFAULT_OVERLAYS",
    "BlockFormat",
    "CastThresholds",
    "ElementFormat",
    "Format",
    "FormatInfo",
    "as_format",
    "block_format",
    "canonical_name",
    "cast_array",
    "cast_thresholds",
    "check_formats",
    "element_format",
    "gradual_underflow",
    "info",
    "numpy_dtype",
    "split_formats",
]
