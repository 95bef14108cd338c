"""What the store gives the routes: every stored step of some tags as numpy columns.

A ``LayerSeries`` holds one tag's steps; a ``LayerGrid`` holds tags that share their steps,
each column a [tags, steps] matrix (a heatmap computes on it at once). A ``BlockHistory``
is one tag's record of a block-scaled format, its scale histograms included. Both are read with
only the columns a request needs (``Needs``): a heatmap of ``log2_max_abs`` over 1,000
layers and 2,500 steps reads one statistic, not the records. A ``ScalarSeries`` is one of
TensorBoard's scalars (the loss line).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tandv_tb.event_files import metadata
from tandv_tb.event_files.record import COUNTS, STATISTICS, NumericsRecord
from tandv_tb.formats import Format, as_format


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a computation reads: scalar columns (of ``COUNTS``, ``STATISTICS``,
    ``dtype_code``, ``wall_time``), the columns a format holds where it was recorded
    (``Format.columns``), and whether the bins are needed where that format was not
    recorded (to estimate it). A format given by name becomes its value."""

    columns: tuple[str, ...] = ()
    format: Format | None = None
    bins: bool = False

    def __post_init__(self) -> None:
        if self.format is not None:
            object.__setattr__(self, "format", as_format(self.format))

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


class StepColumns:
    """Columns over the held steps, by name: counts, statistics, ``dtype_code`` and the
    columns of a recorded format (``Format.columns``, under ``Format.column_key``: the
    exact casts of an element format, a block format's counts and sums)."""

    steps: np.ndarray  # int64[S]
    columns: dict[str, np.ndarray]
    formats: tuple[Format, ...]  # the formats recorded exactly

    def column(self, name: str) -> np.ndarray:
        found = self.columns.get(name)
        if found is None:  # a route that did not declare what it reads
            raise KeyError(f"column {name!r} was not read")
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

    def format_column(self, format: Format | str, name: str) -> np.ndarray:
        """One of ``format``'s columns (``Format.columns``), where it was read."""
        return self.column(as_format(format).column_key(name))

    def casts(self, format: Format | str) -> tuple[np.ndarray, np.ndarray]:
        """Exact (underflow, overflow) of a recorded format."""
        return self.format_column(format, "underflow"), self.format_column(format, "overflow")


@dataclasses.dataclass
class LayerSeries(StepColumns):
    """The held steps of one tag, ascending (one row per step), with the columns read."""

    name: str  # the layer's name (the tag's, where the store does not know the tag)
    formats: tuple[Format, ...]
    steps: np.ndarray  # int64[S]
    columns: dict[str, np.ndarray]  # name -> [S]
    bins: Bins | None = None  # where read (rows that need an estimate)
    skipped_steps: int = 0  # stored steps left out as malformed

    def __len__(self) -> int:
        return len(self.steps)

    def dtype(self, row: int) -> str:
        return metadata.DTYPE_CODES[int(self.dtype_codes[row])]

    def last_dtype(self) -> str | None:
        """The dtype at the last held step (None without steps)."""
        return self.dtype(len(self) - 1) if len(self) else None

    @classmethod
    def of_record(cls, info: metadata.TagInfo, step: int, record: NumericsRecord) -> LayerSeries:
        """A one-row series holding every column of one record."""
        columns = {name: np.array([getattr(record, name)], dtype=np.int64) for name in COUNTS}
        columns.update({s: np.array([record.statistics[s]]) for s in STATISTICS})
        columns["dtype_code"] = np.array([metadata.DTYPE_CODES.index(record.dtype)])
        for name in info.formats:
            for side, counts in (("underflow", record.underflow), ("overflow", record.overflow)):
                columns[name.column_key(side)] = np.array([counts[name]], dtype=np.int64)
        counts = np.asarray(record.counts, dtype=np.int64)
        bins = Bins(np.array([record.bins_lo]), np.array([0, len(counts)]), counts)
        steps = np.array([step], dtype=np.int64)
        return cls(info.name, info.formats, steps, columns, bins)


@dataclasses.dataclass
class LayerGrid(StepColumns):
    """Tags that hold the same steps, and the same recorded formats: each column a
    [tags, steps] matrix, rows in the order the tags were asked for."""

    formats: tuple[Format, ...]
    steps: np.ndarray  # int64[S]
    columns: dict[str, np.ndarray]  # name -> [T, S]

    def last_dtypes(self) -> list[str]:
        """Each tag's dtype at the last step."""
        return [metadata.DTYPE_CODES[code] for code in self.dtype_codes[:, -1].tolist()]


@dataclasses.dataclass(frozen=True)
class BlockHistory:
    """What one block-scaled format does to one tag at every held step: the columns of
    ``schema.BLOCK_COLUMNS`` ([S] each), and the blocks per scale exponent as a [S, E]
    matrix whose column j is exponent ``scale_lo + j`` (the range of the non-empty ones)."""

    steps: np.ndarray  # int64[S]
    columns: dict[str, np.ndarray]
    scale_lo: int
    scales: np.ndarray  # int64[S, E]


@dataclasses.dataclass(frozen=True)
class ScalarSeries:
    """One TensorBoard scalar tag of a run (the loss), every stored step, ascending."""

    steps: np.ndarray  # int64[S]
    wall_times: np.ndarray  # float64[S]
    values: np.ndarray  # float64[S]
