"""The non-finite watch on a device: the Triton watch kernel's counters, read once a step.

Each tensor the watch reads with the Triton kernel (``tandv_tb.stats.watch_kernel``) gets a
slot of three int64 counters (NaN, +Inf, -Inf) in one buffer per device: a hooked tensor
one launch into its slot, the tensors read at ``step()`` one launch per dtype for all of
them. Nothing is read back until the step's end, when ``Watch.drain`` brings each
device's counters to the host together with whatever else the watch keeps there (one
transfer per device), and the counters are zeroed for the next step (one operation).

A buffer too small for a step grows (a copy of what it holds, once); a grown buffer is
kept, so that a step's counters fit in one from then on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from tandv_tb.stats import triton_watch

#: Counters per tensor: NaN, +Inf, -Inf.
SLOT_WIDTH = 3
#: Slots of a device's first buffer.
_FIRST_SLOTS = 256


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one tensor's counters are: the ``index``-th slot of ``device``'s buffer."""

    device: torch.device
    index: int


class _Buffer:
    def __init__(self, device: torch.device) -> None:
        self.counters = torch.zeros(SLOT_WIDTH * _FIRST_SLOTS, dtype=torch.int64, device=device)
        self.used = 0  # slots handed out this step

    def take(self, slots: int) -> int:
        """The first of ``slots`` free slots (the buffer grows where they do not fit)."""
        first = self.used
        self.used += slots
        if SLOT_WIDTH * self.used > self.counters.numel():
            grown = torch.zeros(
                SLOT_WIDTH * (1 << (self.used - 1).bit_length()),
                dtype=torch.int64,
                device=self.counters.device,
            )
            grown[: self.counters.numel()].copy_(self.counters)
            self.counters = grown
        return first


class Counters:
    """The watch's counters on every device, for one step at a time."""

    def __init__(self) -> None:
        self._buffers: dict[torch.device, _Buffer] = {}

    def _buffer(self, device: torch.device) -> _Buffer:
        if device not in self._buffers:
            self._buffers[device] = _Buffer(device)
        return self._buffers[device]

    def add(self, tensor: torch.Tensor) -> Slot:
        """Count ``tensor``'s NaN/Inf into a new slot (one launch); its values are read
        now, in stream order, so later in-place changes do not reach the counts."""
        buffer = self._buffer(tensor.device)
        index = buffer.take(1)
        triton_watch().watch_into(tensor, buffer.counters, index)
        return Slot(tensor.device, index)

    def add_many(self, tensors: Sequence[torch.Tensor]) -> list[Slot]:
        """``add`` of many tensors, one launch per device and dtype."""
        slots: list[Slot | None] = [None] * len(tensors)
        by_device: dict[torch.device, list[int]] = {}
        for i, tensor in enumerate(tensors):
            by_device.setdefault(tensor.device, []).append(i)
        for device, members in by_device.items():
            buffer = self._buffer(device)
            first = buffer.take(len(members))
            indices = range(first, first + len(members))
            triton_watch().watch_many_into(
                [tensors[i] for i in members], buffer.counters, list(indices)
            )
            for i, index in zip(members, indices):
                slots[i] = Slot(device, index)
        return slots

    def used(self) -> dict[torch.device, torch.Tensor]:
        """The counters handed out this step, by device (still there)."""
        return {
            device: buffer.counters[: SLOT_WIDTH * buffer.used]
            for device, buffer in self._buffers.items()
            if buffer.used
        }

    def clear(self) -> None:
        """Zero the counters handed out, for the next step (once they were read)."""
        for buffer in self._buffers.values():
            if buffer.used:
                buffer.counters.zero_()
                buffer.used = 0
