"""Records of several tags sorted by (tag, step), and the one index over such rows.

``TagSteps`` is where a tag's rows are and which row holds a (tag, step): the store's
``Rows``, its held layouts and the findings' ``RunNumerics`` all look rows up through it.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tandv_tb.store.results import Table


@dataclasses.dataclass(frozen=True)
class TagSteps:
    """The tag and step of rows sorted by (tag, step), one row per (tag, step)."""

    tag_ids: np.ndarray  # int[N]
    steps: np.ndarray  # int64[N]

    @functools.cached_property
    def _runs(self) -> tuple[np.ndarray, np.ndarray]:
        """The tags that have rows, ascending, and where each one's rows start ([T + 1])."""
        ids = self.tag_ids
        starts = np.flatnonzero(np.concatenate((ids[:1] == ids[:1], ids[1:] != ids[:-1])))
        return ids[starts], np.append(starts, len(ids))

    @functools.cached_property
    def _bounds(self) -> dict[int, tuple[int, int]]:
        tags, starts = self._runs
        return dict(zip(tags.tolist(), zip(starts[:-1].tolist(), starts[1:].tolist())))

    def bounds(self, tag_id: int) -> tuple[int, int]:
        """The slice of one tag's rows (empty for a tag without rows)."""
        return self._bounds.get(tag_id, (0, 0))

    def tags(self) -> np.ndarray:
        """The tags that have rows, ascending."""
        return self._runs[0]

    def lengths(self) -> np.ndarray:
        """How many rows each of ``tags()`` has."""
        return np.diff(self._runs[1])

    def row_of(self, tag_ids: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The row of each (tag, step), -1 where there is none."""
        if np.array_equal(steps, self.steps) and np.array_equal(tag_ids, self.tag_ids):
            return np.arange(len(steps))  # the common case: all of them, in order
        tags = self._runs[0]
        which = np.searchsorted(tags, tag_ids)
        known = which < len(tags)
        known[known] = tags[which[known]] == tag_ids[known]
        unique, keys = self._row_keys
        wanted = which * len(unique) + np.searchsorted(unique, steps)
        at = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
        found = known & (at < len(keys))
        if len(keys):
            found &= (keys[at] == wanted) & (self.steps[at] == steps)
        return np.where(found, at, -1)

    @property
    def unique_steps(self) -> np.ndarray:
        """Every step at which some tag has a row, ascending."""
        return self._row_keys[0]

    @functools.cached_property
    def _row_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """Every step held, and each row's (tag, step) as one ascending integer."""
        unique, rank = np.unique(self.steps, return_inverse=True)
        which = np.repeat(np.arange(len(self.lengths())), self.lengths())
        return unique, which * len(unique) + rank.reshape(-1)


@dataclasses.dataclass
class Rows:
    """Records of several tags of a run, sorted by (tag, step), one per (tag, step) (of
    two records at one step the later written stays, as in TensorBoard)."""

    tag_ids: np.ndarray  # int32[N]
    steps: np.ndarray  # int64[N]
    columns: dict[str, np.ndarray]  # name -> [N]
    vectors: tuple[np.ndarray, np.ndarray] | None = None  # (bytes uint8, offsets int64[N+1])

    @functools.cached_property
    def index(self) -> TagSteps:
        return TagSteps(self.tag_ids, self.steps)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.tag_ids, self.steps, *self.columns.values()))


def rows_at(table: Table, order: np.ndarray, columns) -> Rows:
    """The ``Rows`` of a query's result, taken at ``order`` (``latest_per_step``)."""
    return Rows(
        tag_ids=table["tag_id"][order].astype(np.int32),
        steps=table["step"][order],
        columns={c: table[c][order] for c in columns},
    )
