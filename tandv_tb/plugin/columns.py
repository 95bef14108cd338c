"""Every stored step of one numerics tag as numpy columns: what the routes compute on.

The store (``numerics_db``) reads only the columns a request needs (``Needs``): a heatmap of
``log2_max_abs`` over 1,000 layers and 2,500 steps reads one statistic, not the records.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tandv_tb.disk import metadata
from tandv_tb.disk.record import COUNTS, STATISTICS, NumericsRecord


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a computation reads: scalar columns (of ``COUNTS``, ``STATISTICS``,
    ``dtype_code``, ``wall_time``), the exact casts of a format, and whether the bins are
    needed where that format was not recorded (to estimate it)."""

    columns: tuple[str, ...] = ()
    format: str | None = None
    bins: bool = False

    def __or__(self, other: Needs) -> Needs:
        return Needs(
            tuple(dict.fromkeys(self.columns + other.columns)),
            self.format or other.format,
            self.bins or other.bins,
        )


@dataclasses.dataclass(frozen=True)
class Bins:
    """Exponent histograms of several rows: row i's counts are
    ``counts[starts[i]:starts[i + 1]]``, from exponent ``lo[i]``."""

    lo: np.ndarray  # int64[S]
    starts: np.ndarray  # int64[S + 1]
    counts: np.ndarray  # int64


@dataclasses.dataclass
class LayerSeries:
    """The held steps of one tag, ascending (one row per step), with the columns read;
    or of several tags that hold the same steps (``NumericsStore.grid``), each column a
    [tags, steps] matrix."""

    tag_info: metadata.TagInfo
    steps: np.ndarray  # int64[S]
    columns: dict[str, np.ndarray]  # name -> [S] or [T, S]; casts "underflow:F", "overflow:F"
    bins: Bins | None = None  # where read (rows that need an estimate)
    skipped_steps: int = 0  # stored steps left out as malformed

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(self.tag_info.formats)

    def __len__(self) -> int:
        return len(self.steps)

    def column(self, name: str) -> np.ndarray:
        found = self.columns.get(name)
        if found is None:  # a route that did not declare what it reads
            raise KeyError(f"column {name!r} was not read for {self.tag_info.name!r}")
        return found

    def count(self, name: str) -> np.ndarray:
        assert name in COUNTS, name
        return self.column(name)

    def statistic(self, name: str) -> np.ndarray:
        assert name in STATISTICS, name
        return self.column(name)

    @property
    def dtype_codes(self) -> np.ndarray:
        return self.column("dtype_code")

    def dtype(self, row: int) -> str:
        return metadata.DTYPE_CODES[int(self.dtype_codes[row])]

    def last_dtype(self) -> str | None:
        """The dtype at the last held step (None without steps)."""
        return self.dtype(len(self) - 1) if len(self) else None

    def casts(self, format_name: str) -> tuple[np.ndarray, np.ndarray]:
        """Exact (underflow, overflow) of a format recorded for this tag."""
        return self.column(f"underflow:{format_name}"), self.column(f"overflow:{format_name}")


def record_series(info: metadata.TagInfo, step: int, record: NumericsRecord) -> LayerSeries:
    """A one-row ``LayerSeries`` holding every column of one record."""
    columns = {name: np.array([getattr(record, name)], dtype=np.int64) for name in COUNTS}
    columns.update({s: np.array([record.statistics[s]]) for s in STATISTICS})
    columns["dtype_code"] = np.array([metadata.DTYPE_CODES.index(record.dtype)])
    for name in info.formats:
        columns[f"underflow:{name}"] = np.array([record.underflow[name]], dtype=np.int64)
        columns[f"overflow:{name}"] = np.array([record.overflow[name]], dtype=np.int64)
    counts = np.asarray(record.counts, dtype=np.int64)
    bins = Bins(np.array([record.bins_lo]), np.array([0, len(counts)]), counts)
    return LayerSeries(info, np.array([step], dtype=np.int64), columns, bins)
