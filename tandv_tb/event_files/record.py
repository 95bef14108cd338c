"""``NumericsRecord``: one tracked tensor at one step, as written to disk and served.

``STATISTICS`` and ``COUNTS`` are the contract's scalar statistics and counts, in their
stored order (``summary`` stores a record; the engine's ``TensorStats.to_record`` makes one).
``BlockCounts`` holds what is recorded for one block-scaled format
(``tandv_tb.formats.blocks``).
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


def snr_db(signal: np.ndarray | float, error: np.ndarray | float) -> np.ndarray:
    """The quantization error of a block-scaled format as a signal-to-noise ratio in dB,
    ``10 log10(signal / error)`` from the sums of squares of the values and of their errors
    (``BlockCounts``): +Inf where nothing is lost, NaN where there is no signal (no finite
    non-zero value). Element-wise over arrays."""
    signal, error = np.asarray(signal, np.float64), np.asarray(error, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = 10.0 * np.log10(signal / error)
    return np.where(signal > 0, ratio, np.nan)


@dataclasses.dataclass
class BlockCounts:
    """What a tensor does in one block-scaled format (``tandv_tb.formats.blocks``): exact
    counts, the blocks' scale exponents and the quantization error.

    ``scales[i]`` is the number of blocks holding a finite non-zero value whose scale
    exponent is ``scale_lo + i``; ``zero_blocks`` are the other blocks. ``signal`` and
    ``error`` are the sums of squares of the finite values and of their quantization errors
    (value less dequantized value), both in units of ``4**exponent``: only their ratio and
    sums of them (``merge``) mean anything, and no power of two overflows.
    """

    underflow: int
    overflow: int
    zero_blocks: int
    clamped_low: int
    clamped_high: int
    scale_lo: int
    scales: np.ndarray
    exponent: int
    signal: float
    error: float

    @property
    def blocks(self) -> int:
        """Every block of the tensor."""
        return int(self.scales.sum()) + self.zero_blocks

    @property
    def snr_db(self) -> float:
        """``snr_db`` of this tensor's values."""
        return float(snr_db(self.signal, self.error))

    def merge(self, other: BlockCounts) -> BlockCounts:
        """The counts of both tensors together (sums at the larger ``exponent``)."""
        lo = min(self.scale_lo, other.scale_lo)
        hi = max(self.scale_lo + len(self.scales), other.scale_lo + len(other.scales))
        scales = np.zeros(max(hi - lo, 0), dtype=np.int64)
        for part in (self, other):
            scales[part.scale_lo - lo : part.scale_lo - lo + len(part.scales)] += part.scales
        exponent = max(self.exponent, other.exponent)
        a = math.ldexp(1.0, 2 * (self.exponent - exponent))
        b = math.ldexp(1.0, 2 * (other.exponent - exponent))
        return BlockCounts(
            underflow=self.underflow + other.underflow,
            overflow=self.overflow + other.overflow,
            zero_blocks=self.zero_blocks + other.zero_blocks,
            clamped_low=self.clamped_low + other.clamped_low,
            clamped_high=self.clamped_high + other.clamped_high,
            scale_lo=lo,
            scales=scales,
            exponent=exponent,
            signal=self.signal * a + other.signal * b,
            error=self.error * a + other.error * b,
        )

    def trimmed(self) -> BlockCounts:
        """The same counts with ``scales`` cut to its non-empty range (``scale_lo`` 0 when
        it is all empty)."""
        nonzero = np.flatnonzero(self.scales)
        if len(nonzero) == 0:
            return dataclasses.replace(self, scale_lo=0, scales=np.zeros(0, dtype=np.int64))
        first, last = int(nonzero[0]), int(nonzero[-1])
        return dataclasses.replace(
            self, scale_lo=self.scale_lo + first, scales=self.scales[first : last + 1].copy()
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BlockCounts):
            return NotImplemented
        mine, theirs = dataclasses.asdict(self), dataclasses.asdict(other)
        same_scales = np.array_equal(mine.pop("scales"), theirs.pop("scales"))
        return same_scales and all(_same_float(mine[k], theirs[k]) for k in mine)


@dataclasses.dataclass
class NumericsRecord(TensorCounts):
    """One tracked tensor at one step: what is stored on disk and served.

    ``counts[i]`` is the number of finite non-zero values x with
    ``floor(log2|x|) == bins_lo + i``; only the non-empty range is kept (``counts`` is
    empty when there is no such value). ``statistics`` maps every name of ``STATISTICS`` to
    a float (NaN where undefined); ``underflow``/``overflow`` map format names to exact
    counts for the element formats recorded at tracking time, ``blocks`` the block-scaled
    formats recorded to their ``BlockCounts``.
    """

    bins_lo: int
    counts: np.ndarray
    statistics: dict[str, float]
    underflow: dict[str, int] = dataclasses.field(default_factory=dict)
    overflow: dict[str, int] = dataclasses.field(default_factory=dict)
    blocks: dict[str, BlockCounts] = dataclasses.field(default_factory=dict)

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
        mine.pop("blocks"), theirs.pop("blocks")
        return same_counts and same_stats and mine == theirs and self.blocks == other.blocks


def _same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b
