"""From a step's pending statistics to one ``TensorStats`` per tracked tensor."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from tandv_tb import stats
from tandv_tb.stats import TensorStats
from tandv_tb.torch.collect import Entry


def fetch_merged(entries: Sequence[Entry]) -> list[TensorStats]:
    """One transfer for the whole step, then each entry's calls merged into one."""
    flat = stats.fetch([pending for entry in entries for pending in entry.pending])
    merged, start = [], 0
    for entry in entries:
        parts = flat[start : start + len(entry.pending)]
        start += len(entry.pending)
        merged.append(functools.reduce(TensorStats.merge, parts))
    return merged
