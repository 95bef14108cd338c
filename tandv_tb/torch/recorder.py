"""Start the statistics of one tensor (no host sync) and file them under its name."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tandv_tb import stats
from tandv_tb.stats import Pending
from tandv_tb.torch.memo import TensorMemo
from tandv_tb.torch.parallel_layout import ParallelLayout, Spread, local
from tandv_tb.torch.skips import untrackable_reason
from tandv_tb.tracking.skips import SkipLog
from tandv_tb.tracking.step_buffer import Entry, StepBuffer


class Recorder:
    """Computes statistics of tracked tensors into the step buffer.

    ``layout`` tells how each tensor's values on this rank stand to the other ranks' in a
    distributed run (``parallel_layout``): a replica that another rank counts is skipped.

    A tensor recorded again in the same step, unchanged, reuses its statistics
    (``TensorMemo``).

    The CPU kernel runs in the calling thread (``threads=1``). Inside a training step
    torch's OpenMP workers hold the other cores, and splitting was measured slower there
    (225 vs 180 ms of kernel a step). At ``step()`` torch is idle, but waking a worker
    thread per tensor costs more than it saves on a VM: the weights, gradients and
    optimizer state of the reference workload took 26 ms a step in one thread against
    46-53 ms split over two (bench/RESULTS.md).
    """

    def __init__(self, formats: Sequence[str], skips: SkipLog, layout: ParallelLayout) -> None:
        self.formats = tuple(formats)
        self.buffer = StepBuffer()
        self.layout = layout
        self._skips = skips
        self._computed: TensorMemo[Pending] = TensorMemo()

    def drain(self) -> list[Entry]:
        """The step's entries (``StepBuffer.drain``, their parts ``Pending``); forgets the
        step's tensors."""
        self._computed.clear()
        return self.buffer.drain()

    def record(
        self,
        name: str,
        tensor_type: str,
        module_type: str,
        order: int,
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
        if spread is Spread.ELSEWHERE:
            return
        if spread is Spread.PARTIAL:
            self._skips.skip(name, tensor_type, "a DTensor with pending partial sums")
            return
        tensor = local(tensor)
        reason = untrackable_reason(tensor)
        if reason is None:
            try:
                pending = self._computed.get(tensor, self._compute, reuse)
            except Exception as error:  # tracking never stops training
                reason = f"{type(error).__name__}: {error}"
        if reason is not None:
            self._skips.skip(name, tensor_type, reason)
            return
        self.buffer.add(name, tensor_type, module_type, pending, order=order, spread=spread)

    def skip(self, name: str, tensor_type: str, reason: str) -> None:
        """Say, once, that ``name`` is not recorded and why."""
        self._skips.skip(name, tensor_type, reason)

    def _compute(self, tensor: torch.Tensor) -> Pending:
        return stats.compute(tensor.detach(), self.formats, threads=1)
