"""A tracker's place among the ranks of a distributed run: whether it combines the ranks'
statistics and writes, how its tensors lie over the ranks (``parallel_layout``), the
combining itself (``distributed``) and the runs of per-rank records (``rank_runs``).

Without ``torch.distributed`` (or with one rank) every tensor is this process's whole
one, and it writes; with ``per_rank=True`` every rank writes its own run ``rank<k>``.
"""

from __future__ import annotations

import torch.distributed as dist

from tandv_tb.event_files.nonfinite_record import NonfiniteEntry
from tandv_tb.torch.distributed import RankCombiner, is_distributed
from tandv_tb.torch.options import TorchOptions
from tandv_tb.torch.parallel_layout import ParallelLayout, Spread
from tandv_tb.torch.parameters import Parameters
from tandv_tb.torch.pipeline_stage import Stage
from tandv_tb.torch.rank_runs import RankRuns
from tandv_tb.torch.watch import across_ranks
from tandv_tb.tracking.processes import Apart
from tandv_tb.tracking.step_buffer import Result


class Ranks:
    """The distributed side of one tracker (made at ``track``, on every rank alike): the
    ``tandv_tb.tracking.processes.ProcessMerge`` of PyTorch's ranks."""

    def __init__(self, parameters: Parameters, options: TorchOptions, stage: Stage) -> None:
        distributed = is_distributed()
        group = options.process_group
        rank = dist.get_rank(group) if distributed else 0
        combining = distributed and not options.per_rank
        self.layout = ParallelLayout(
            parameters.every(),
            combining=combining,
            group=group,
            flat_parameters=parameters.flat,
            layouts=options.layouts,
            mesh=options.mesh,
        )
        formats = options.formats
        self._combiner = RankCombiner(formats, group, stage.position) if combining else None
        #: Whether this rank writes, and the run it writes (None: the logdir itself).
        self.writes = not combining or rank == 0
        self.run = f"rank{rank}" if options.per_rank and distributed else None
        self._formats = formats
        self._rank_runs: RankRuns | None = None
        #: How this rank's values of each tensor recorded this step stand to the other
        #: ranks' (``Recorder`` notes them), by (name, tensor type).
        self.spreads: dict[tuple[str, str], Spread] = {}

    @property
    def combining(self) -> bool:
        return self._combiner is not None

    def writing_into(self, logdir: str) -> None:
        """The writing rank's run is ``logdir``: per-rank records go beside it."""
        if self.combining:
            self._rank_runs = RankRuns(logdir, self._formats)

    def combine(self, results: list[Result]) -> tuple[list[Result], Apart]:
        """The step's records the writing rank writes: merged over the ranks, and the
        ranks' own (``RankCombiner.combine``); this rank's own where not combining."""
        if self._combiner is None:
            return results, []
        return self._combiner.combine(results, self.spreads, self.layout.tensor_parallel)

    def nonfinite_anywhere(self, found: bool) -> bool:
        """Whether some rank's tensors of the step just combined held NaN/Inf (``found``,
        this rank's, where not combining); every rank agrees."""
        return found if self._combiner is None else self._combiner.nonfinite

    def across(self, found: list[NonfiniteEntry]) -> list[NonfiniteEntry]:
        """An untracked step's NaN/Inf entries of every rank, merged (on every rank)."""
        if self._combiner is None:
            return found
        return across_ranks(found, self._combiner.group, self._combiner.device)

    def write_apart(self, step: int, apart: Apart) -> None:
        """Write each rank's own records of ``step`` into its run (on the writing rank)."""
        if self._rank_runs is not None:
            self._rank_runs.add(step, apart)

    def close(self) -> None:
        if self._rank_runs is not None:
            self._rank_runs.close()
