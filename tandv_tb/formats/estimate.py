"""The one rule that estimates a format's under/overflow from an exponent histogram.

Where a format was not recorded at tracking time, its under/overflow is estimated from the
bins: a bin's values are taken as spread uniformly in ``log2|x|`` and the part beyond the
exact cast thresholds (``thresholds.cast_thresholds``) is counted. The dashboards, ``read_frame``
and the findings' ``scale`` estimate all use this rule.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from tandv_tb.formats.dtypes import info
from tandv_tb.formats.thresholds import cast_thresholds


@functools.cache
def bin_weights(dtype: str, format_name: str) -> tuple[np.ndarray, np.ndarray]:
    """The share of each bin of ``dtype`` (lowest first) that underflows / overflows in
    ``format_name``."""
    dtype_info = info(dtype)
    thresholds = cast_thresholds(dtype, format_name)
    n = np.arange(dtype_info.min_exponent, dtype_info.max_exponent + 1, dtype=np.float64)
    under, over = thresholds.under_pos, thresholds.over_pos
    under_part = np.clip(math.log2(under) - n, 0.0, 1.0) if under > 0 else np.zeros_like(n)
    over_part = np.clip(n + 1 - math.log2(over), 0.0, 1.0) if math.isfinite(over) else 0 * n
    return under_part, over_part
