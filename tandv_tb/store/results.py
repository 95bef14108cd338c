"""Query results as numpy columns, and the order that puts records by (tag, step).

``fetch`` reads a query's numeric columns from Arrow buffers (pyarrow's ``to_numpy``
imports pandas, about a second of a restart's first heatmap); ``latest_per_step`` orders
rows by (tag, step), keeping of each (tag, step) the last written record.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

#: A query's result (``fetch``): column name -> values, in the order DuckDB returned them.
Table = dict[str, "np.ndarray | pa.ChunkedArray"]


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


def latest_per_step(table: Table, written: Callable[[], Table]) -> np.ndarray:
    """Row order by (tag, step), keeping of each (tag, step) the last written record.

    Rows stored step by step, every step with the same tags (a run written step by step,
    ``ingest``), are a transpose and need no sort. Others are ordered by a stable sort on
    one (tag, step) key, unless a step was written twice; then by a full sort on (tag,
    step, file, seq), whose ``file_id`` and ``seq`` columns (the same rows, in the same
    order) ``written()`` reads only then."""
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
    in ascending order (as ``ingest`` stores a run written step by step): a transpose,
    found without sorting. None for any other rows."""
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
    return transposed(n_tags, n_steps)


def transposed(n_tags: int, n_steps: int) -> np.ndarray:
    """The (tag, step) order of rows stored step by step, each step with every tag."""
    return (np.arange(n_tags)[:, None] + n_tags * np.arange(n_steps)).ravel()
