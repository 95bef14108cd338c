"""A run's numerics as flat columns over every tensor and recorded step, read from the
store in one call (what every kind of finding vectorises over)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tandv_tb.event_files.metadata import TagInfo, execution_key
from tandv_tb.event_files.record import COUNTS
from tandv_tb.store import NumericsStore
from tandv_tb.store.rows import TagSteps

#: The columns the findings read for every record.
BASE_COLUMNS = (*COUNTS, "max_abs", "rm2")


def metric_values(columns: dict[str, np.ndarray], metric: str) -> np.ndarray:
    """A metric's value at every row (log2 of 0 is -inf, of NaN or a negative NaN)."""
    values = columns[metric.removeprefix("log2_")]
    if not metric.startswith("log2_"):
        return values.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(values)


@dataclasses.dataclass
class RunNumerics:
    """Every readable record of a run's numerics tags, sorted by (tensor, step).

    Tensor ``g`` is ``tensors[g]``; ``rank[g]`` is its place in execution order
    (``metadata.execution_key``); row ``i`` belongs to tensor ``tensor[i]``, and tensor g's rows
    are ``starts[g]:starts[g + 1]``."""

    run: str
    tensors: list[TagInfo]
    tag_ids: np.ndarray  # int[G]
    rank: np.ndarray  # int[G]
    tensor: np.ndarray  # int[N]
    steps: np.ndarray  # int64[N]
    columns: dict[str, np.ndarray]
    starts: np.ndarray  # int[G + 1]

    def __len__(self) -> int:
        return len(self.steps)

    def row_of(self, tag_ids: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The row of each (tag, step), -1 where there is none."""
        return self._index.row_of(tag_ids, steps)

    @functools.cached_property
    def _index(self) -> TagSteps:
        return TagSteps(self.tag_ids[self.tensor], self.steps)

    @property
    def unique_steps(self) -> np.ndarray:
        """Every step at which some tensor was recorded, ascending."""
        return self._index.unique_steps

    def finite(self) -> np.ndarray:
        """The number of finite values of each row."""
        c = self.columns
        return c["numel"] - c["nan_count"] - c["posinf_count"] - c["neginf_count"]

    def rank_of(self, tensor_type: str, name: str) -> int:
        """The place in execution order of the tensor (type, name); unknown ones last."""
        return self._ranks.get((tensor_type, name), len(self.tensors))

    @functools.cached_property
    def _ranks(self) -> dict[tuple[str, str], int]:
        found: dict[tuple[str, str], int] = {}
        for info, rank in zip(self.tensors, self.rank.tolist()):
            key = (info.tensor_type, info.name)
            found[key] = min(found.get(key, rank), rank)
        return found

    def label(self, g: int) -> str:
        info = self.tensors[g]
        return f"{info.tensor_type} {info.name!r}"

    @classmethod
    def read(cls, db: NumericsStore, run: str, extra: tuple[str, ...] = ()) -> RunNumerics:
        """The run as of its last refresh (``NumericsStore.refresh``)."""
        known = sorted(
            (tag_id, info) for tag_id, info, _ in db.tags(run).values() if info is not None
        )
        tag_ids = np.array([tag_id for tag_id, _ in known], dtype=np.int64)
        tensors = [info for _, info in known]
        keys = [execution_key(i.tensor_type, i.order, i.name) for i in tensors]
        rank = np.empty(len(keys), dtype=np.int64)
        rank[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys))
        wanted = tuple(dict.fromkeys((*BASE_COLUMNS, *extra)))
        rows = db.rows(run, tag_ids.tolist(), wanted)
        tensor = np.searchsorted(tag_ids, rows.tag_ids)  # rows come sorted by tag id
        starts = np.searchsorted(tensor, np.arange(len(tensors) + 1))
        return cls(run, tensors, tag_ids, rank, tensor, rows.steps, rows.columns, starts)


def first_stretches(
    mask: np.ndarray, tensor: np.ndarray, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(start, size)`` of each tensor's first stretch of at least ``length`` consecutive
    True rows of ``mask`` (rows sorted by tensor, then step; ``tensor`` gives each row's)."""
    true = np.flatnonzero(mask)
    if not len(true):
        return true, true
    continues = np.zeros(len(true), dtype=bool)
    continues[1:] = (true[1:] == true[:-1] + 1) & (tensor[true[1:]] == tensor[true[:-1]])
    sizes = np.bincount(np.cumsum(~continues) - 1)
    starts = true[~continues]
    long = sizes >= length
    starts, sizes = starts[long], sizes[long]
    _, first = np.unique(tensor[starts], return_index=True)
    return starts[first], sizes[first]
