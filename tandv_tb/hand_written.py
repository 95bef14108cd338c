"""The records a ``NumericsWriter`` is given one at a time, gathered into their step.

``add_numerics`` starts a tensor's statistics on its own device (``stats.compute``) and
leaves them there: the step's statistics come to the host together when the step is
written (``stats.fetch``: one transfer per device, as a tracker's step), not one sync per
tensor. On the CPU they are ready at once.
"""

from __future__ import annotations

from typing import NamedTuple

from tandv_tb.event_files.record import NumericsRecord


class RecordItem(NamedTuple):
    """One record for ``NumericsWriter.add_records``, with ``add_record``'s arguments
    (``record``: a ``NumericsRecord``, or, kept in a ``HandWrittenStep``, statistics still
    pending on a device)."""

    name: str
    record: NumericsRecord
    tensor_type: str = "Activation"
    module_type: str = ""
    order: int | None = None


class HandWrittenStep:
    """The records of the step being given, until it is written."""

    def __init__(self) -> None:
        self.step = 0
        self._items: list[RecordItem] = []

    def __bool__(self) -> bool:
        return bool(self._items)

    def add(self, step: int, item: RecordItem) -> None:
        """Add a record of ``step`` (the caller writes the records of another step first)."""
        self.step = step
        self._items.append(item)

    def take(self) -> list[RecordItem]:
        """The step's records, every one a ``NumericsRecord`` (the pending statistics
        brought to the host in one ``fetch``); none are kept."""
        items, self._items = self._items, []
        pending = [i for i, item in enumerate(items) if not isinstance(item.record, NumericsRecord)]
        if pending:
            from tandv_tb import stats

            fetched = stats.fetch([items[i].record for i in pending])
            for i, tensor_stats in zip(pending, fetched):
                items[i] = items[i]._replace(record=tensor_stats.to_record())
        return items
