"""Start the statistics of one tensor (no host sync) and file them under its name."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch

from tandv_tb import stats
from tandv_tb.stats import Pending
from tandv_tb.torch.collect import Entry, StepBuffer
from tandv_tb.torch.skips import untrackable_reason
from tandv_tb.tracking import SkipLog

try:
    from torch.distributed.tensor import DTensor
except ImportError:  # a build without distributed support
    DTensor = None


class Recorder:
    """Computes statistics of tracked tensors into the step buffer.

    ``replicated=False`` (ranks other than 0 in a combined distributed run) skips the
    tensors that are the same on every rank: rank 0 records them alone.

    A tensor recorded again in the same step, unchanged (a container module returns its
    last child's output; two gradient hooks see one gradient), reuses its statistics.

    The CPU kernel runs in the calling thread (``threads=1``). Inside a training step
    torch's OpenMP workers hold the other cores, and splitting was measured slower there
    (225 vs 180 ms of kernel a step, 2026-11-22). At ``step()`` torch is idle, but waking
    a worker thread per tensor costs more than it saves on a VM: the weights, gradients
    and optimizer state of the reference workload took 26 ms a step in one thread against
    46-53 ms split over two (2026-11-23, 2-core AMD EPYC VM).
    """

    def __init__(self, formats: Sequence[str], skips: SkipLog, replicated: bool = True) -> None:
        self.formats = tuple(formats)
        self.buffer = StepBuffer()
        self._skips = skips
        self._replicated = replicated
        # id(tensor) -> (a weak reference to it, its version counter, its statistics)
        self._computed: dict[int, tuple[weakref.ref, int, Pending]] = {}

    def drain(self) -> list[Entry]:
        """The step's entries (``StepBuffer.drain``); forgets the step's tensors."""
        self._computed = {}
        return self.buffer.drain()

    def record(
        self,
        name: str,
        tensor_type: str,
        module_type: str,
        order: int,
        tensor: torch.Tensor,
        sharded: bool = True,
    ) -> None:
        """Add ``tensor``'s statistics to ``(name, tensor_type)``'s entry of this step.

        ``sharded`` says whether each rank holds a different part of the tensor (so that
        ranks' statistics add up); a DTensor tells for itself.
        """
        if DTensor is not None and isinstance(tensor, DTensor):
            if any(placement.is_partial() for placement in tensor.placements):
                self._skips.skip(name, tensor_type, "a DTensor with pending partial sums")
                return
            sharded = any(placement.is_shard() for placement in tensor.placements)
            tensor = tensor.to_local()
        if not sharded and not self._replicated:
            return
        reason = untrackable_reason(tensor)
        if reason is None:
            try:
                pending = self._compute(tensor)
            except Exception as error:  # tracking never stops training
                reason = f"{type(error).__name__}: {error}"
        if reason is not None:
            self._skips.skip(name, tensor_type, reason)
            return
        self.buffer.add(name, tensor_type, module_type, order, pending, sharded)

    def _compute(self, tensor: torch.Tensor) -> Pending:
        """``stats.compute``, once per tensor object and version in a step."""
        seen = self._computed.get(id(tensor))
        if seen is not None and seen[0]() is tensor and seen[1] == tensor._version:
            return seen[2]
        pending = stats.compute(tensor.detach(), self.formats, threads=1)
        self._computed[id(tensor)] = (weakref.ref(tensor), tensor._version, pending)
        return pending
