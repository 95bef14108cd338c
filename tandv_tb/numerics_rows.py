"""Query results of the numerics store as numpy columns, and records of several tags.

``fetch`` reads a query's numeric columns from Arrow buffers (pyarrow's ``to_numpy``
imports pandas, about a second of a restart's first heatmap); ``latest_per_step`` orders
rows by (tag, step), keeping of each (tag, step) the last written record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pyarrow as pa

#: A query's result (``fetch``): column name -> values, in the order DuckDB returned them.
Table = dict[str, "np.ndarray | pa.ChunkedArray"]


@dataclasses.dataclass
class Rows:
    """Records of several tags of a run, sorted by (tag, step), one per (tag, step) (of
    two records at one step the later written stays, as in TensorBoard)."""

    tag_ids: np.ndarray  # int32[N]
    steps: np.ndarray  # int64[N]
    columns: dict[str, np.ndarray]  # name -> [N]
    vectors: tuple[np.ndarray, np.ndarray] | None = None  # (bytes uint8, offsets int64[N+1])
    #: Which rows of the query's result (in stored order) these are: lets another column of
    #: the same tags be read alone (``NumericsDB.rows(layout=...)``).
    order: np.ndarray | None = dataclasses.field(default=None, repr=False)
    n_read: int = 0
    _bounds: dict[int, tuple[int, int]] | None = dataclasses.field(default=None, repr=False)
    _shared: tuple[np.ndarray | None] | None = dataclasses.field(default=None, repr=False)

    def nbytes(self) -> int:
        arrays = [self.tag_ids, self.steps, *self.columns.values()]
        if self.order is not None:
            arrays.append(self.order)
        return sum(a.nbytes for a in arrays)

    def bounds(self, tag_id: int) -> tuple[int, int]:
        """The slice of one tag's rows (empty for a tag without rows)."""
        if self._bounds is None:
            ids = self.tag_ids
            starts = np.flatnonzero(np.concatenate((ids[:1] == ids[:1], ids[1:] != ids[:-1])))
            ends = np.append(starts[1:], len(ids))
            self._bounds = dict(zip(ids[starts].tolist(), zip(starts.tolist(), ends.tolist())))
        return self._bounds.get(tag_id, (0, 0))

    def shared_steps(self) -> np.ndarray | None:
        """The steps every tag holds, when all of them hold the same ones (the usual case:
        every layer recorded at each step), else None: one array that each tag's rows can
        use, so that comparing the layers' steps is an identity check."""
        if self._shared is None:
            self.bounds(-1)
            slices = list(self._bounds.values())
            found = None
            if slices:
                length = slices[0][1] - slices[0][0]
                if length and all(end - start == length for start, end in slices):
                    matrix = self.steps.reshape(-1, length)  # rows are sorted by (tag, step)
                    if (matrix == matrix[:1]).all():
                        found = matrix[0]
            self._shared = (found,)
        return self._shared[0]


@dataclasses.dataclass(frozen=True)
class HeldLayout:
    """A ``Rows``' layout (no columns) as kept between queries. Where every tag holds the
    same steps (the usual case) only its order, tag bounds and shared steps are kept: the
    tags and steps of every row are made again from them for each query (about 1 ms for
    2.5 M rows), so that a run's layout takes 10 MB instead of 40 MB and the layouts of
    runs compared side by side stay held together (two runs' 80 MB filled the layout
    cache, and each query of one run evicted the other's: 150 ms of a new heatmap's 250 ms
    went to reading and sorting it again, 2026-11-23)."""

    rows: Rows  # tag_ids and steps empty where ``tags`` is not None
    tags: np.ndarray | None = None  # int32: the tags in row order, each ``len(shared)`` rows

    @classmethod
    def of(cls, layout: Rows) -> HeldLayout:
        shared = layout.shared_steps()
        if shared is None:
            return cls(layout)
        layout.bounds(-1)
        tags = np.fromiter(layout._bounds, dtype=np.int32, count=len(layout._bounds))
        empty = np.zeros(0, dtype=np.int64)
        return cls(dataclasses.replace(layout, tag_ids=empty.astype(np.int32), steps=empty), tags)

    def layout(self) -> Rows:
        """The layout, every row's tag and step included."""
        if self.tags is None:
            return self.rows
        shared = self.rows._shared[0]
        return dataclasses.replace(
            self.rows,
            tag_ids=np.repeat(self.tags, len(shared)),
            steps=np.tile(shared, len(self.tags)),
        )

    def nbytes(self) -> int:
        extra = 0 if self.tags is None else self.tags.nbytes + self.rows._shared[0].nbytes
        return self.rows.nbytes() + extra


def fetch(cursor, query: str, params: list) -> Table:
    """A query's result: numeric columns as numpy arrays, others as Arrow columns."""
    table = cursor.sql(query, params=params).to_arrow_table()
    return {name: _to_numpy(table.column(name)) for name in table.column_names}


_NUMPY_TYPES = {pa.int8(): np.int8, pa.int32(): np.int32, pa.int64(): np.int64}
_NUMPY_TYPES[pa.float64()] = np.float64


def _to_numpy(column: pa.ChunkedArray) -> np.ndarray | pa.ChunkedArray:
    """A numeric Arrow column without nulls as numpy, from its buffers (``to_numpy`` would
    import pandas: a second of a restart's first heatmap); any other column as it is."""
    dtype = _NUMPY_TYPES.get(column.type)
    if dtype is None or column.null_count:
        return column
    parts = [
        np.frombuffer(chunk.buffers()[1], dtype=dtype)[chunk.offset : chunk.offset + len(chunk)]
        for chunk in column.chunks
    ]
    return parts[0] if len(parts) == 1 else np.concatenate(parts or [np.zeros(0, dtype)])


def num_rows(table: Table) -> int:
    return len(next(iter(table.values()))) if table else 0


def rows_at(table: Table, order: np.ndarray, columns) -> Rows:
    """The ``Rows`` of a query's result, taken at ``order`` (``latest_per_step``)."""
    return Rows(
        tag_ids=table["tag_id"][order].astype(np.int32),
        steps=table["step"][order],
        columns={c: table[c][order] for c in columns},
    )


def latest_per_step(table: Table, written: Callable[[], Table]) -> np.ndarray:
    """Row order by (tag, step), keeping of each (tag, step) the last written record.

    Rows come back as a few runs each ordered by (tag, step) (a stored chunk is), so a
    stable sort on one (tag, step) key (timsort merges the runs) orders them, unless a
    step was written twice; then a full sort on (tag, step, file, seq), whose ``file_id``
    and ``seq`` columns (the same rows, in the same order) ``written()`` reads only then."""
    tags, steps = table["tag_id"], table["step"]
    if not len(tags):
        return np.zeros(0, dtype=np.int64)
    low = steps.min()
    if tags.min() >= 0 and tags.max() < 1 << 22 and steps.max() - low < 1 << 40:
        key = (tags.astype(np.int64) << 40) | (steps - low)
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        if (ordered[1:] > ordered[:-1]).all():  # each tag's steps once each
            return order
    keys = written()
    files, seq = keys["file_id"], keys["seq"]
    order = np.lexsort((seq, files, steps, tags))
    t, st = tags[order], steps[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (t[1:] != t[:-1]) | (st[1:] != st[:-1])
    return order[last]
