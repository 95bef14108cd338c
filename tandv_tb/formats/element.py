"""``ElementFormat``: a format every value is cast to on its own (``float8_e4m3fn``,
``bfloat16``, ``float4_e2m1fn``, any name ``ml_dtypes.finfo`` accepts).

Its counts are a record's casts: an (underflow, overflow) pair, exact where it was recorded
(by the thresholds of ``thresholds``), else estimated from the exponent histogram
(``estimate``).
"""

from __future__ import annotations

import functools

from tandv_tb.formats.base import CAST_METRICS, CASTS, Format
from tandv_tb.formats.dtypes import FormatInfo, info, numpy_dtype
from tandv_tb.formats.thresholds import CastThresholds, cast_thresholds


class ElementFormat(Format):
    """An element format; ``info`` holds its exponent range and limits."""

    section = CASTS
    columns = ("underflow", "overflow")
    metrics = CAST_METRICS
    estimable = True
    scales_itself = False
    saturates = False

    info: FormatInfo

    @classmethod
    def of(cls, name: str) -> ElementFormat:
        return element_format(name)

    def thresholds(self, source: str) -> CastThresholds:
        """Where casting the dtype ``source`` to this format under- and overflows."""
        return cast_thresholds(source, self)


def element_format(name: str) -> ElementFormat:
    """The element format named ``name``, by its canonical name (``ValueError`` for a name
    ``ml_dtypes.finfo`` does not accept): one value per canonical name."""
    return _element_format(numpy_dtype(name).name)


@functools.cache
def _element_format(canonical: str) -> ElementFormat:
    return ElementFormat._made(canonical, info=info(canonical))
