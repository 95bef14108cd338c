"""Columns of records kept between requests, each read once per version of its run.

Another metric, column count, reduction or window over the same layers reads only the
columns it has not read yet. A run's layout (``layout.HeldLayout``: which stored row is
whose) and each column are kept apart, within budgets of their own: a new metric reads one
column and arranges it by the held layout, and reading many columns never evicts the
layout that every query of the run uses.
"""

from __future__ import annotations

import numpy as np

from tandv_tb.store.layout import HeldLayout
from tandv_tb.store.lru import LRU
from tandv_tb.store.reader import Reader
from tandv_tb.store.rows import Rows

#: Bytes of columns and of layouts held (two compared runs' layouts of 1,000 layers x
#: 2,500 steps fit together).
COLUMN_BUDGET = 64 << 20
LAYOUT_BUDGET = 80 << 20


class HeldColumns:
    def __init__(self, reader: Reader):
        self._reader = reader
        self._columns = LRU(COLUMN_BUDGET, _held_size)
        self._layouts = LRU(LAYOUT_BUDGET, lambda held: held.nbytes())

    def read(
        self, run: str, version: int, tag_ids: list[int], columns: tuple[str, ...]
    ) -> tuple[HeldLayout, dict[str, np.ndarray]]:
        """The layout of the tags' records at the run's ``version``, and their ``columns``
        (with ``dtype_code``) arranged by it."""
        columns = tuple(dict.fromkeys(("dtype_code", *columns)))
        base = (run, version, tuple(tag_ids))
        layout = self._layouts.get(base)
        held = {c: self._columns.get((*base, c)) for c in columns} if layout is not None else {}
        missing = tuple(c for c in columns if held.get(c) is None)
        found = None
        if layout is not None and missing:
            found = self._reader.columns(run, tag_ids, missing, layout)
            if found is None:  # the records changed since the layout was read
                layout, held = None, {}
        if layout is None:
            layout, found = self._reader.layout(run, tag_ids, columns)
            self._layouts.put(base, layout)
        for name, values in (found or {}).items():
            self._columns.put((*base, name), values)
            held[name] = values
        return layout, {c: held[c] for c in columns}

    def per_format(
        self,
        run: str,
        version: int,
        present: list[int],
        table: str,
        recorded: dict[int, int],
        columns: tuple[str, ...],
        layout: HeldLayout,
    ) -> dict[str, np.ndarray] | Rows:
        """``columns`` of ``table`` (casts or block formats) of the ``recorded`` tags
        (``{tag_id: format index}``), kept like a column: arranged by ``layout`` (of
        ``present``) where they line up with it, else as ``Rows`` of their own."""
        key = (run, version, tuple(present), table, columns, *sorted(recorded.items()))
        held = self._columns.get(key)
        if held is None:
            held = self._reader.per_format_in(run, table, recorded, columns, layout)
            if held is None:
                held = self._reader.per_format(run, table, recorded, columns)
            self._columns.put(key, held)
        return held


def _held_size(held: Rows | np.ndarray | dict[str, np.ndarray]) -> int:
    if isinstance(held, dict):
        return sum(values.nbytes for values in held.values())
    return held.nbytes if isinstance(held, np.ndarray) else held.nbytes()
