"""One step's recorded statistics, by tracked tensor: what both trackers gather, and how
it reaches the host.

A tracker adds statistics as they are recorded, still on their devices: one tensor's
(``add``: a ``stats.Pending`` under its name and type), or a compiled program's for several
(``add_packed``: a ``stats.Packed`` labelled ``(name, tensor type, module type)``, JAX's
tracked functions, whose tensors are known once it is on the host). ``results`` brings
them all to the host in one ``stats.fetch`` and merges each tracked tensor's parts (a
module called twice, shared weights, gradient accumulation): one ``Entry`` per tracked
tensor, in the order first recorded, placed in the model by ``Orders``.
"""

from __future__ import annotations

import dataclasses
import functools

from tandv_tb import stats
from tandv_tb.stats import Packed, Pending, TensorStats
from tandv_tb.tracking.orders import Orders
from tandv_tb.writer import RecordItem

#: What a tensor is known by: name, tensor type, type of the module it belongs to.
Label = tuple[str, str, str]


@dataclasses.dataclass
class Entry:
    """One tracked tensor of a step: its parts' statistics (one per time it was recorded)
    and ``order``, its place in the model (``Orders``)."""

    name: str
    tensor_type: str
    module_type: str
    order: int = 0
    parts: list[TensorStats] = dataclasses.field(default_factory=list)


#: A tracked tensor with its parts' statistics merged.
Result = tuple[Entry, TensorStats]


def record_item(entry: Entry, merged: TensorStats) -> RecordItem:
    """What the writer writes of a tracked tensor."""
    return RecordItem(
        entry.name, merged.to_record(), entry.tensor_type, entry.module_type, entry.order
    )


class StepBuffer:
    """The statistics recorded in the current step, in the order recorded."""

    def __init__(self, orders: Orders | None = None) -> None:
        #: Where the tensors sit in the model; a tracker places modules as they run.
        self.orders = Orders() if orders is None else orders
        self._parts: list[tuple[Label, Pending | TensorStats] | Packed] = []

    def add(self, name: str, tensor_type: str, module_type: str, part: Pending) -> None:
        self._parts.append(((name, tensor_type, module_type), part))

    def add_packed(self, packed: Packed) -> None:
        self._parts.append(packed)

    def __len__(self) -> int:
        """How many parts were added (a packed result counts once)."""
        return len(self._parts)

    def names_and_types(self) -> list[tuple[str, str]]:
        """The (name, tensor type) of every tensor added by name so far, once each."""
        labels = (part[0][:2] for part in self._parts if not isinstance(part, Packed))
        return list(dict.fromkeys(labels))

    def results(self) -> list[Result]:
        """Every tracked tensor so far with its parts merged, on the host after one
        ``stats.fetch`` for all that is still on a device. The buffer keeps the parts,
        fetched: asked again, it reads only what was added since."""
        self._parts = self._on_host()
        entries: dict[tuple[str, str], Entry] = {}
        for (name, tensor_type, module_type), part in self._parts:
            entry = entries.get((name, tensor_type))
            if entry is None:
                entry = entries[name, tensor_type] = Entry(name, tensor_type, module_type)
            entry.parts.append(part)
        ordered = list(entries.values())
        for entry, order in zip(ordered, self.orders.of(entries)):
            entry.order = order
        return [(e, functools.reduce(TensorStats.merge, e.parts)) for e in ordered]

    def drain(self) -> list[Result]:
        """``results``; the buffer is empty afterwards."""
        try:
            return self.results()
        finally:
            self.clear()

    def clear(self) -> None:
        """Drop the step's parts, unread."""
        self._parts = []

    def _on_host(self) -> list[tuple[Label, TensorStats]]:
        """The parts, fetched; a packed result's in its tensors' place."""
        waiting = [
            part if isinstance(part, Packed) else part[1]
            for part in self._parts
            if isinstance(part, Packed) or isinstance(part[1], Pending)
        ]
        fetched = iter(stats.fetch(waiting))
        on_host = []
        for part in self._parts:
            if isinstance(part, Packed):
                on_host += next(fetched)
            elif isinstance(part[1], Pending):
                on_host.append((part[0], next(fetched)))
            else:
                on_host.append(part)
        return on_host
