"""Query results of the numerics store as numpy columns, and records of several tags.

``fetch`` reads a query's numeric columns from Arrow buffers (pyarrow's ``to_numpy``
imports pandas, about a second of a restart's first heatmap); ``latest_per_step`` orders
rows by (tag, step), keeping of each (tag, step) the last written record.
"""

from __future__ import annotations

import dataclasses
import functools
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
    #: the same tags be read alone (``HeldLayout.of``, ``NumericsDB.columns``).
    order: np.ndarray | None = dataclasses.field(default=None, repr=False)
    n_read: int = 0
    _bounds: dict[int, tuple[int, int]] | None = dataclasses.field(default=None, repr=False)

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


@dataclasses.dataclass(frozen=True)
class Grid:
    """Tags that each hold the same steps (the usual case: every layer recorded at each
    step): a column of theirs is a [tags, steps] matrix."""

    tags: np.ndarray  # int32[T], ascending
    steps: np.ndarray  # int64[S], ascending

    @functools.cached_property
    def row_of(self) -> dict[int, int]:
        return {tag: row for row, tag in enumerate(self.tags.tolist())}

    @classmethod
    def of(cls, rows: Rows) -> Grid | None:
        """The grid of ``rows`` (sorted by tag and step), or None where the tags hold
        different steps."""
        rows.bounds(-1)
        slices = list(rows._bounds.values())
        if not slices:
            return None
        length = slices[0][1] - slices[0][0]
        if not length or any(end - start != length for start, end in slices):
            return None
        matrix = rows.steps.reshape(-1, length)
        if not (matrix == matrix[:1]).all():
            return None
        tags = np.fromiter(rows._bounds, dtype=np.int32, count=len(slices))
        return cls(tags, matrix[0].copy())


@dataclasses.dataclass(frozen=True)
class HeldLayout:
    """How the rows of some tags, as a query returns them (stored order), are put in
    (tag, step) order; kept between queries, so that another column of the same tags is
    read alone and arranged (``arrange``) without sorting again.

    - A ``grid`` (every tag at the same steps) arranges a column as a [tags, steps]
      matrix. Where the rows were stored step by step, each step with every tag in order
      (as the trackers and ``NumericsWriter`` write them), that matrix is a transposed view
      of the stored column: nothing is gathered and no memory is written (``order`` is
      None). Fresh memory is what a new heatmap query paid most for in the server: the
      kernel zeroing pages took half of its time (``perf``, 2026-11-24).
    - Otherwise ``order`` gathers the stored rows, and ``rows`` keeps every row's tag and
      step.
    """

    n_read: int  # rows the query returns, in stored order
    order: np.ndarray | None  # the stored row of each (tag, step) row; None: transposed
    grid: Grid | None
    rows: Rows | None  # without a grid: every row's tag and step (no columns)

    @classmethod
    def of(cls, found: Rows) -> HeldLayout:
        """The layout of ``found`` (``NumericsDB.rows``, which sets its order)."""
        grid = Grid.of(found)
        if grid is None:
            rows = dataclasses.replace(found, columns={}, vectors=None, order=None)
            return cls(found.n_read, found.order, None, rows)
        n_tags, n_steps = len(grid.tags), len(grid.steps)
        order = found.order
        if found.n_read == n_tags * n_steps and np.array_equal(order, _transposed(n_tags, n_steps)):
            order = None
        return cls(found.n_read, order, grid, None)

    def arrange(self, stored: np.ndarray) -> np.ndarray:
        """A column of the query's rows in stored order, in this layout: a [tags, steps]
        matrix for a grid, else [rows] in (tag, step) order."""
        if self.grid is None:
            return stored[self.order]
        shape = (len(self.grid.tags), len(self.grid.steps))
        if self.order is None:
            return stored.reshape(shape[::-1]).T
        return stored[self.order].reshape(shape)

    def shape(self, ordered: np.ndarray) -> np.ndarray:
        """A column already in (tag, step) order (``NumericsDB.rows``), in this layout."""
        if self.grid is None:
            return ordered
        return ordered.reshape(len(self.grid.tags), len(self.grid.steps))

    def matches(self, tag_ids: np.ndarray, steps: np.ndarray) -> bool:
        """Whether rows with these tags and steps, in stored order, are this layout's."""
        if len(tag_ids) != self.n_read:
            return False
        if self.order is not None and len(self.order) != self.n_read:
            return False  # a step written twice: which of its rows is whose is not known
        if self.grid is None:
            return np.array_equal(tag_ids[self.order], self.rows.tag_ids) and np.array_equal(
                steps[self.order], self.rows.steps
            )
        return bool(
            (self.arrange(tag_ids) == self.grid.tags[:, None]).all()
            and (self.arrange(steps) == self.grid.steps[None, :]).all()
        )

    def part(self, column: np.ndarray, tag_id: int) -> np.ndarray:
        """One tag's values out of an arranged column (none for a tag without rows)."""
        if self.grid is None:
            start, end = self.rows.bounds(tag_id)
            return column[start:end]
        row = self.grid.row_of.get(tag_id)
        return column[row] if row is not None else column[:0, 0]

    def steps_of(self, tag_id: int) -> np.ndarray:
        """One tag's steps: for a grid the same array for every tag (comparing the layers'
        steps is then an identity check)."""
        if self.grid is None:
            start, end = self.rows.bounds(tag_id)
            return self.rows.steps[start:end]
        return self.grid.steps if tag_id in self.grid.row_of else self.grid.steps[:0]

    def nbytes(self) -> int:
        arrays = [] if self.order is None else [self.order]
        if self.grid is not None:
            arrays += [self.grid.tags, self.grid.steps]
        return sum(a.nbytes for a in arrays) + (self.rows.nbytes() if self.rows else 0)


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

    Rows stored step by step, every step with the same tags (a run written step by step,
    ``numerics_ingest``), are a transpose and need no sort. Others are ordered by a stable
    sort on one (tag, step) key, unless a step was written twice; then by a full sort on
    (tag, step, file, seq), whose ``file_id`` and ``seq`` columns (the same rows, in the
    same order) ``written()`` reads only then."""
    tags, steps = table["tag_id"], table["step"]
    if not len(tags):
        return np.zeros(0, dtype=np.int64)
    transposed = _step_major_order(tags, steps)
    if transposed is not None:
        return transposed
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


def _step_major_order(tags: np.ndarray, steps: np.ndarray) -> np.ndarray | None:
    """The (tag, step) order of rows stored step by step, every step with the same tags
    in ascending order (as ``numerics_ingest`` stores a run written step by step): a
    transpose, found without sorting. None for any other rows."""
    n_tags = int(np.argmax(steps != steps[0])) or len(steps)  # the first step's rows
    if len(steps) % n_tags:
        return None
    n_steps = len(steps) // n_tags
    by_step, step_tags = steps.reshape(n_steps, n_tags), tags.reshape(n_steps, n_tags)
    first, held = step_tags[0], by_step[:, 0]
    if not ((first[1:] > first[:-1]).all() and (held[1:] > held[:-1]).all()):
        return None
    if not ((step_tags == first).all() and (by_step == held[:, None]).all()):
        return None
    return _transposed(n_tags, n_steps)


def _transposed(n_tags: int, n_steps: int) -> np.ndarray:
    """The (tag, step) order of rows stored step by step, each step with every tag."""
    return (np.arange(n_tags)[:, None] + n_tags * np.arange(n_steps)).ravel()
