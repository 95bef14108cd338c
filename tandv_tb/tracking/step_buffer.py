"""One tracked step's statistics, by tracked tensor: what both trackers gather.

A tensor recorded several times in a step (a module called twice, shared weights,
gradient accumulation) is one tracked tensor whose record covers every call: its parts are
kept under its (name, tensor type) in the order first recorded, and merged once they are
on the host (``TensorStats.merge``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from tandv_tb.stats import TensorStats


@dataclasses.dataclass
class Entry:
    """One tracked tensor of a step: every part recorded for it.

    ``order`` places it in the model (the torch tracker's; the JAX tracker orders its
    records when it writes them). ``spread`` says how this rank's values of it stand to the
    other ranks' in a distributed run (``tandv_tb.torch.parallel_layout.Spread``: a piece
    of data or of a shard, merged with theirs; the whole tensor; this rank's own).
    """

    name: str
    tensor_type: str
    module_type: str
    order: int = 0
    spread: str = "piece"
    parts: list = dataclasses.field(default_factory=list)


class StepBuffer:
    """The parts recorded in the current step, grouped by (name, tensor type)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}

    def add(
        self,
        name: str,
        tensor_type: str,
        module_type: str,
        part: object,
        *,
        order: int = 0,
        spread: str = "piece",
    ) -> None:
        entry = self._entries.get((name, tensor_type))
        if entry is None:
            entry = Entry(name, tensor_type, module_type, order, spread)
            self._entries[name, tensor_type] = entry
        entry.parts.append(part)

    def __len__(self) -> int:
        return len(self._entries)

    def names_and_types(self) -> list[tuple[str, str]]:
        """The (name, tensor type) of every entry so far."""
        return list(self._entries)

    def entries(self) -> list[Entry]:
        """Every entry so far, in the order first added; the buffer keeps them."""
        return list(self._entries.values())

    def drain(self) -> list[Entry]:
        """Every entry, in the order first added; the buffer is empty afterwards."""
        entries = list(self._entries.values())
        self._entries = {}
        return entries


def merged(entries: Sequence[Entry], fetched: Sequence[TensorStats]) -> list[TensorStats]:
    """One ``TensorStats`` per entry: its parts' statistics (``fetched``, the parts of all
    entries in order, on the host) merged."""
    result, start = [], 0
    for entry in entries:
        end = start + len(entry.parts)
        result.append(functools.reduce(TensorStats.merge, fetched[start:end]))
        start = end
    return result
