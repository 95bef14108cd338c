"""How a query's rows of some tags, in stored order, are put in (tag, step) order: held
between queries (``HeldLayout``), so that another column of the same tags is read alone
and arranged without sorting again. Layouts stay inside the store."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tandv_tb.store.results import transposed
from tandv_tb.store.rows import TagSteps


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
    def of(cls, index: TagSteps) -> Grid | None:
        """The grid of rows sorted by tag and step, or None where the tags hold different
        steps."""
        lengths = index.lengths()
        if not len(lengths) or not lengths[0] or (lengths != lengths[0]).any():
            return None
        matrix = index.steps.reshape(-1, int(lengths[0]))
        if not (matrix == matrix[:1]).all():
            return None
        return cls(index.tags().astype(np.int32), matrix[0].copy())


@dataclasses.dataclass(frozen=True)
class HeldLayout:
    """How the rows of some tags, as a query returns them (stored order), are put in
    (tag, step) order (``arrange``).

    - A ``grid`` (every tag at the same steps) arranges a column as a [tags, steps]
      matrix. Where the rows were stored step by step, each step with every tag in order
      (as the trackers and ``NumericsWriter`` write them), that matrix is a transposed view
      of the stored column: nothing is gathered and no memory is written (``order`` is
      None). Fresh memory is what a new heatmap query paid most for in the server: the
      kernel zeroing pages took half of its time (``perf``, ``bench/RESULTS.md``).
    - Otherwise ``order`` gathers the stored rows, and ``index`` keeps every row's tag and
      step.
    """

    n_read: int  # rows the query returns, in stored order
    order: np.ndarray | None  # the stored row of each (tag, step) row; None: transposed
    grid: Grid | None
    index: TagSteps | None  # without a grid: every row's tag and step

    @classmethod
    def of(cls, index: TagSteps, order: np.ndarray, n_read: int) -> HeldLayout:
        """The layout of rows in (tag, step) order (``index``) taken at ``order`` from the
        ``n_read`` rows of a query (``results.latest_per_step``)."""
        if n_read < 1 << 31:
            order = order.astype(np.int32)  # 4 bytes a row: two compared runs' layouts fit
        grid = Grid.of(index)
        if grid is None:
            return cls(n_read, order, None, index)
        n_tags, n_steps = len(grid.tags), len(grid.steps)
        if n_read == n_tags * n_steps and np.array_equal(order, transposed(n_tags, n_steps)):
            return cls(n_read, None, grid, None)
        return cls(n_read, order, grid, None)

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
        """A column already in (tag, step) order, in this layout."""
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
            return np.array_equal(tag_ids[self.order], self.index.tag_ids) and np.array_equal(
                steps[self.order], self.index.steps
            )
        return bool(
            (self.arrange(tag_ids) == self.grid.tags[:, None]).all()
            and (self.arrange(steps) == self.grid.steps[None, :]).all()
        )

    def part(self, column: np.ndarray, tag_id: int) -> np.ndarray:
        """One tag's values out of an arranged column (none for a tag without rows)."""
        if self.grid is None:
            start, end = self.index.bounds(tag_id)
            return column[start:end]
        row = self.grid.row_of.get(tag_id)
        return column[row] if row is not None else column[:0, 0]

    def steps_of(self, tag_id: int) -> np.ndarray:
        """One tag's steps: for a grid the same array for every tag (comparing the layers'
        steps is then an identity check)."""
        if self.grid is None:
            start, end = self.index.bounds(tag_id)
            return self.index.steps[start:end]
        return self.grid.steps if tag_id in self.grid.row_of else self.grid.steps[:0]

    def nbytes(self) -> int:
        arrays = [] if self.order is None else [self.order]
        if self.grid is not None:
            arrays += [self.grid.tags, self.grid.steps]
        if self.index is not None:
            arrays += [self.index.tag_ids, self.index.steps]
        return sum(a.nbytes for a in arrays)
