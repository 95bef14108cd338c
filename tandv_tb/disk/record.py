"""``NumericsRecord``: one tracked tensor at one step, as written to disk and served.

``STATISTICS`` and ``COUNTS`` are the contract's scalar statistics and counts, in their
stored order (``summary`` stores a record; the engine's ``TensorStats.to_record`` makes one).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

#: The contract's scalar statistics, in their stored order.
STATISTICS = (
    "mean",
    "std",
    "mean_abs",
    "max_abs",
    "min_abs",
    "min_abs_nonzero",
    "rm2",
    "rm4",
    "rm8",
)
#: The contract's counts, in their stored order.
COUNTS = ("numel", "zero_count", "nan_count", "posinf_count", "neginf_count")


@dataclasses.dataclass
class TensorCounts:
    """The dtype and the contract's counts (``COUNTS``) of one tensor: the fields that
    begin both a stored record and the engine's mergeable statistics."""

    dtype: str
    numel: int
    zero_count: int
    nan_count: int
    posinf_count: int
    neginf_count: int

    @property
    def finite_count(self) -> int:
        return self.numel - self.nan_count - self.posinf_count - self.neginf_count


@dataclasses.dataclass
class NumericsRecord(TensorCounts):
    """One tracked tensor at one step: what is stored on disk and served.

    ``counts[i]`` is the number of finite non-zero values x with
    ``floor(log2|x|) == bins_lo + i``; only the non-empty range is kept (``counts`` is
    empty when there is no such value). ``statistics`` maps every name of ``STATISTICS`` to
    a float (NaN where undefined); ``underflow``/``overflow`` map format names to exact
    counts for the formats recorded at tracking time.
    """

    bins_lo: int
    counts: np.ndarray
    statistics: dict[str, float]
    underflow: dict[str, int] = dataclasses.field(default_factory=dict)
    overflow: dict[str, int] = dataclasses.field(default_factory=dict)

    def exponent_histogram(self) -> dict[int, int]:
        """``{n: count}`` for every non-empty bin."""
        return {self.bins_lo + i: int(c) for i, c in enumerate(self.counts) if c}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NumericsRecord):
            return NotImplemented
        mine, theirs = dataclasses.asdict(self), dataclasses.asdict(other)
        same_counts = np.array_equal(mine.pop("counts"), theirs.pop("counts"))
        same_stats = all(
            _same_float(self.statistics[k], other.statistics.get(k, math.nan)) for k in STATISTICS
        )
        mine.pop("statistics"), theirs.pop("statistics")
        return same_counts and same_stats and mine == theirs


def _same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b
