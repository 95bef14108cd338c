"""How a tracker's processes share a step (``ProcessMerge``): alone by default
(``ONE_PROCESS``: JAX's statistics of a global array already describe all of it, and a
PyTorch run of one rank); PyTorch's distributed ranks combine theirs
(``tandv_tb.torch.ranks.Ranks``)."""

from __future__ import annotations

from typing import Protocol

from tandv_tb.event_files.nonfinite_record import NonfiniteEntry
from tandv_tb.stats import TensorStats
from tandv_tb.tracking.step_buffer import Entry, Result

#: Each rank's own results of the tensors whose layout over the ranks cannot be told.
Apart = list[tuple[int, Entry, TensorStats]]


class ProcessMerge(Protocol):
    #: Whether the processes combine their steps (then every one must end each step).
    combining: bool

    def combine(self, results: list[Result]) -> tuple[list[Result], Apart]:
        """The step's results the writing process writes, merged over the processes,
        and those kept apart per rank (every process calls it at the same steps)."""
        ...

    def nonfinite_anywhere(self, found: bool) -> bool:
        """Whether some process's tensors of the step just combined held NaN/Inf
        (``found``: this one's); every process agrees."""
        ...

    def across(self, found: list[NonfiniteEntry]) -> list[NonfiniteEntry]:
        """NaN/Inf entries of every process, merged (on every process)."""
        ...

    def write_apart(self, step: int, apart: Apart) -> None:
        """Write the results kept apart into each rank's own run."""
        ...


class _OneProcess:
    combining = False

    def combine(self, results: list[Result]) -> tuple[list[Result], Apart]:
        return results, []

    def nonfinite_anywhere(self, found: bool) -> bool:
        return found

    def across(self, found: list[NonfiniteEntry]) -> list[NonfiniteEntry]:
        return found

    def write_apart(self, step: int, apart: Apart) -> None:
        pass


ONE_PROCESS: ProcessMerge = _OneProcess()
