"""One tracked step on the host: every recorded value's statistics fetched in one transfer,
merged per tracked tensor (``tandv_tb.tracking.step_buffer``: a module called several times gives
one record)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from tandv_tb.jax.compiled import Packed
from tandv_tb.stats import Pending, TensorStats
from tandv_tb.tracking.step_buffer import StepBuffer, merged


@dataclasses.dataclass
class Item:
    """One recorded value (or, once drained, one tracked tensor with all parts merged)."""

    name: str
    tensor_type: str
    module_type: str
    stats: Pending | TensorStats


class StepResults:
    """The current step's pending statistics, in the order they were recorded."""

    def __init__(self) -> None:
        self._parts: list[Packed | Item] = []

    def __len__(self) -> int:
        return len(self._parts)

    def add_packed(self, pack: Packed) -> None:
        self._parts.append(pack)

    def add(self, item: Item) -> None:
        self._parts.append(item)

    def drain(self) -> list[Item]:
        """Every tracked tensor's merged ``TensorStats``, in the order first recorded, after
        one ``jax.device_get`` for all; the step's results are dropped."""
        parts, self._parts = self._parts, []
        packs = [p for p in parts if isinstance(p, Packed)]
        waiting = [
            p.stats
            for p in parts
            if isinstance(p, Item) and isinstance(p.stats, Pending) and p.stats.ready is None
        ]
        host_packs, host_pending = jax.device_get(
            (
                [(p.layout, p.counts, p.moments) for p in packs],
                [(p.counts, p.moments) for p in waiting],
            )
        )
        unpacked = {id(p): _unpack(p, host) for p, host in zip(packs, host_packs)}
        fetched = {
            id(p): TensorStats.unpack(p.dtype, p.formats, *host)
            for p, host in zip(waiting, host_pending)
        }
        buffer = StepBuffer()
        for part in parts:
            items = unpacked[id(part)] if isinstance(part, Packed) else [part]
            for item in items:
                stats = item.stats
                if isinstance(stats, Pending):
                    stats = stats.ready if stats.ready is not None else fetched[id(stats)]
                buffer.add(item.name, item.tensor_type, item.module_type, stats)
        entries = buffer.drain()
        on_host = merged(entries, [part for entry in entries for part in entry.parts])
        return [
            Item(e.name, e.tensor_type, e.module_type, stats) for e, stats in zip(entries, on_host)
        ]


def _unpack(pack: Packed, host: tuple) -> list[Item]:
    layout, counts, moments = host
    slots = pack.layouts[int(layout)]
    count_ends = np.cumsum([s.n_counts for s in slots], dtype=np.int64)
    moment_ends = np.cumsum([s.n_moments for s in slots], dtype=np.int64)
    return [
        Item(
            s.name,
            s.tensor_type,
            s.module_type,
            TensorStats.unpack(
                s.dtype,
                s.formats,
                counts[c_end - s.n_counts : c_end],
                moments[m_end - s.n_moments : m_end],
            ),
        )
        for s, c_end, m_end in zip(slots, count_ends, moment_ends)
    ]
