"""What one tracked step has gathered: statistics still on their devices, by tracked tensor."""

from __future__ import annotations

import dataclasses

from tandv_tb.stats import Pending


@dataclasses.dataclass
class Entry:
    """One tracked tensor of this step: every call's pending statistics.

    ``combined`` says whether its statistics add up across ranks (activations of a
    data-parallel batch, shards of a parameter) or are the same on every rank
    (replicated parameters), which rank 0 writes alone.
    """

    name: str
    tensor_type: str
    module_type: str
    order: int
    combined: bool
    pending: list[Pending]


class StepBuffer:
    """Pending statistics of the current step, grouped by (name, tensor type)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}

    def add(
        self,
        name: str,
        tensor_type: str,
        module_type: str,
        order: int,
        pending: Pending,
        combined: bool = True,
    ) -> None:
        entry = self._entries.get((name, tensor_type))
        if entry is None:
            entry = Entry(name, tensor_type, module_type, order, combined, [])
            self._entries[name, tensor_type] = entry
        entry.pending.append(pending)

    def __len__(self) -> int:
        return len(self._entries)

    def drain(self) -> list[Entry]:
        """Every entry, in the order first added; the buffer is empty afterwards."""
        entries = list(self._entries.values())
        self._entries = {}
        return entries
