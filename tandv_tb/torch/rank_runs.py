"""Each rank's own records of the tensors whose layout over the ranks cannot be told.

Such a tensor (``parallel_layout.Spread.UNTOLD`` in a model that computes with DTensors)
may be a replica on some ranks and a shard on others: merging the ranks' values could
count it twice, or count a piece as the whole. So each rank's values are kept apart: they
reach the writing rank with the step's one collective, and it writes them into the run
``rank<k>`` beside its own (``<run>/rank<k>``, as ``per_rank=True`` names runs), with one
warning per tensor naming it and saying how to record it whole.
"""

from __future__ import annotations

import os
import warnings

from tandv_tb.torch.parallel_layout import UntoldLayoutWarning
from tandv_tb.tracking.processes import Apart
from tandv_tb.tracking.step_buffer import Entry, record_item
from tandv_tb.writer import NumericsWriter, RecordItem


class RankRuns:
    """The runs ``rank<k>`` under ``logdir`` (the writing rank's run), opened when first
    written."""

    def __init__(self, logdir: str, formats: tuple[str, ...]) -> None:
        self._logdir = logdir
        self._formats = formats
        self._writers: dict[int, NumericsWriter] = {}
        self._warned: set[str] = set()

    def add(self, step: int, records: Apart) -> None:
        """Write each rank's records of ``step`` into its run."""
        by_rank: dict[int, list[RecordItem]] = {}
        for rank, entry, merged in records:
            self._warn(entry)
            by_rank.setdefault(rank, []).append(record_item(entry, merged))
        for rank, items in sorted(by_rank.items()):
            self._writer(rank).add_records(step, items)

    def _writer(self, rank: int) -> NumericsWriter:
        writer = self._writers.get(rank)
        if writer is None:
            logdir = os.path.join(self._logdir, f"rank{rank}")
            writer = self._writers[rank] = NumericsWriter(logdir, formats=self._formats)
        return writer

    def _warn(self, entry: Entry) -> None:
        if entry.name in self._warned:
            return
        self._warned.add(entry.name)
        warnings.warn(
            f"tandv_tb: cannot tell how {entry.name!r} lies over the ranks (a plain tensor in "
            "a model that computes with DTensors, not the local part of one: a replica or a "
            f"shard); each rank's values of it are recorded apart, in {self._logdir}/rank<k>. "
            "Give its placements to track(layouts={pattern: placements}, mesh=mesh) to "
            "record it whole",
            UntoldLayoutWarning,
            stacklevel=4,
        )

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
