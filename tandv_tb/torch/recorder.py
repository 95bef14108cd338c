"""Start the statistics of one tensor (no host sync) and file them under its name."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from tandv_tb import stats
from tandv_tb.stats import Pending
from tandv_tb.torch.memo import TensorMemo
from tandv_tb.torch.parallel_layout import ParallelLayout, Spread, local
from tandv_tb.torch.skips import untrackable_reason
from tandv_tb.tracking.skip_log import SkipLog
from tandv_tb.tracking.step_buffer import StepBuffer

#: What ``Recorder.record_many`` takes per tensor: ``record``'s arguments, ``spread`` told.
ToRecord = tuple[str, str, str, torch.Tensor, Spread]


class Recorder:
    """Computes statistics of tracked tensors into the step's buffer.

    ``layout`` tells how each tensor's values on this rank stand to the other ranks' in
    a distributed run (``parallel_layout``): a replica that another rank counts is
    skipped; each recorded tensor's ``Spread`` is noted in ``spreads`` (``Ranks.spreads``,
    which combines the ranks' statistics by it).

    A tensor recorded again in the same step, unchanged, reuses its statistics
    (``TensorMemo``).

    The CPU kernel runs in the calling thread (``threads=1``). Inside a training step
    torch's OpenMP workers hold the other cores, and splitting was measured slower there
    (225 vs 180 ms of kernel a step). At ``step()`` torch is idle, but waking a worker
    thread per tensor costs more than it saves on a VM: the weights, gradients and
    optimizer state of the reference workload took 26 ms a step in one thread against
    46-53 ms split over two (bench/RESULTS.md).
    """

    def __init__(
        self,
        formats: Sequence[str],
        skips: SkipLog,
        layout: ParallelLayout,
        spreads: dict[tuple[str, str], Spread],
        buffer: StepBuffer,
    ) -> None:
        self.formats = tuple(formats)
        self.buffer = buffer
        self.layout = layout
        self._spreads = spreads
        self._skips = skips
        self._computed: TensorMemo[Pending] = TensorMemo()

    def new_step(self) -> None:
        """Forget the last step's tensors and spreads."""
        self._computed.clear()
        self._spreads.clear()

    def record(
        self,
        name: str,
        tensor_type: str,
        module_type: str,
        tensor: torch.Tensor,
        spread: Spread | None = None,
        reuse: bool = True,
    ) -> None:
        """Add ``tensor``'s statistics to ``(name, tensor_type)``'s entry of this step.

        ``spread`` says how this rank's values of it stand to the other ranks'; by default
        the tensor tells, as an activation's (``ParallelLayout.of_data``): a gradient is
        given its activation's, a parameter's tensors ``ParallelLayout.of_parameter``.
        ``reuse=False`` computes the statistics afresh although the same tensor, at the
        same version, was recorded before (a tensor a compiled graph hands over:
        ``Tracker._receive`` says why).
        """
        if spread is None:
            spread = self.layout.of_data(name, tensor)
        values = self._values(name, tensor_type, tensor, spread)
        if values is None:
            return
        try:
            pending = self._computed.get(values, self._compute, reuse)
        except Exception as error:  # tracking never stops training
            self._skips.skip(name, tensor_type, f"{type(error).__name__}: {error}")
            return
        self._add(name, tensor_type, module_type, pending, spread)

    def record_many(self, items: Iterable[ToRecord]) -> None:
        """``record`` of many tensors (what ``step()`` reads), their statistics computed
        together (``stats.compute_many``: a few launches for all of them on a device)."""
        taken = []
        for name, tensor_type, module_type, tensor, spread in items:
            values = self._values(name, tensor_type, tensor, spread)
            if values is not None:
                taken.append((name, tensor_type, module_type, values, spread))
        try:
            pending = self._computed.get_many([item[3] for item in taken], self._compute_many)
        except Exception:  # one by one, so that each says what failed
            for item in taken:
                self.record(*item)
            return
        for (name, tensor_type, module_type, _, spread), part in zip(taken, pending):
            self._add(name, tensor_type, module_type, part, spread)

    def _add(
        self, name: str, tensor_type: str, module_type: str, part: Pending, spread: Spread
    ) -> None:
        """File ``part`` in the step's buffer; a tensor's spread is its first part's."""
        self._spreads.setdefault((name, tensor_type), spread)
        self.buffer.add(name, tensor_type, module_type, part)

    def _values(
        self, name: str, tensor_type: str, tensor: torch.Tensor, spread: Spread
    ) -> torch.Tensor | None:
        """The values of ``tensor`` this rank records, or None (a replica another rank
        counts; pending partial sums or a tensor without float values: skipped)."""
        if spread is Spread.ELSEWHERE:
            return None
        if spread is Spread.PARTIAL:
            self._skips.skip(name, tensor_type, "a DTensor with pending partial sums")
            return None
        tensor = local(tensor)
        reason = untrackable_reason(tensor)
        if reason is not None:
            self._skips.skip(name, tensor_type, reason)
            return None
        return tensor

    def skip(self, name: str, tensor_type: str, reason: str) -> None:
        """Say, once, that ``name`` is not recorded and why."""
        self._skips.skip(name, tensor_type, reason)

    # The engine reads the values without autograd (no ``detach``: on a device that is an
    # operation per tensor, which the Triton kernels, reading memory, do without).
    def _compute(self, tensor: torch.Tensor) -> Pending:
        return stats.compute(tensor, self.formats, threads=1)

    def _compute_many(self, tensors: list[torch.Tensor]) -> list[Pending]:
        return stats.compute_many(tensors, self.formats, threads=1)
