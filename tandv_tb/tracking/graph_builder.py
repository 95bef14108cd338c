"""A model's graph built as its module calls run: what both trackers' graph captures share.

A capture tells ``CallGraph`` when each call begins (with the shapes it was given) and ends
(with the shapes it returned), and which calls feed which; ``graph()`` gives the
``ModelGraph`` the writer records (``tandv_tb.event_files.graph_record``): one node per call, with
its id (``<layer>#<k>`` for the module's k-th call), its parent (the call it ran in) and its
order (where it began), and each edge once.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Mapping

from tandv_tb.event_files.graph_record import ModelGraph, TensorSpec, invocation_id


class GraphCaptureWarning(RuntimeWarning):
    """The model's graph could not be recorded (training goes on; the message says why)."""


def warn_capture(message: str, stacklevel: int = 3) -> None:
    """Say why a graph is not recorded (``GraphCaptureWarning``)."""
    warnings.warn(f"tandv_tb: {message}", GraphCaptureWarning, stacklevel=stacklevel)


@dataclasses.dataclass
class _Call:
    id: str
    layer: str
    module_type: str
    parent: str | None
    inputs: tuple[TensorSpec, ...]
    extra: Mapping[str, object]
    outputs: tuple[TensorSpec, ...] = ()


class CallGraph:
    """The calls of one forward pass, as they begin and end, and the edges between them."""

    def __init__(self) -> None:
        self._calls: list[_Call] = []
        self._by_id: dict[str, _Call] = {}
        self._counts: dict[str, int] = {}  # calls so far, by layer
        self._running: list[str] = []  # ids of the calls begun and not ended, outermost first
        self._edges: dict[tuple[str, str], None] = {}

    @property
    def running(self) -> str | None:
        """The innermost call running now (None at the top)."""
        return self._running[-1] if self._running else None

    @property
    def last(self) -> str | None:
        """The call begun last (None before the first)."""
        return self._calls[-1].id if self._calls else None

    def __len__(self) -> int:
        return len(self._calls)

    def begin(
        self,
        layer: str,
        module_type: str,
        inputs: Iterable[TensorSpec] = (),
        extra: Mapping[str, object] | None = None,
    ) -> str:
        """A call of ``layer`` begins (inside the one running now); its id."""
        count = self._counts.get(layer, 0)
        self._counts[layer] = count + 1
        call = _Call(
            invocation_id(layer, count),
            layer,
            module_type,
            self.running,
            tuple(inputs),
            extra or {},
        )
        self._calls.append(call)
        self._by_id[call.id] = call
        self._running.append(call.id)
        return call.id

    def end(self, call_id: str, outputs: Iterable[TensorSpec] = ()) -> None:
        """The call ``call_id`` returned ``outputs``; calls begun inside it and never ended
        (a forward that raised) end with it."""
        self._by_id[call_id].outputs = tuple(outputs)
        if call_id in self._running:
            del self._running[self._running.index(call_id) :]

    def parent(self, call_id: str) -> str | None:
        return self._by_id[call_id].parent

    def inside(self, call_id: str, ancestor: str) -> bool:
        """Whether ``call_id`` ran within the call ``ancestor`` (or is it)."""
        node: str | None = call_id
        while node is not None:
            if node == ancestor:
                return True
            node = self._by_id[node].parent
        return False

    def edge(self, source: str, target: str) -> None:
        """An output of ``source`` reaches ``target`` (kept once; none from a call to itself)."""
        if source != target:
            self._edges[source, target] = None

    def graph(self) -> ModelGraph:
        """The graph: nodes in call order, edges by their target's order, then their
        source's (the same graph gives the same record). Given to ``ModelGraph`` as JSON
        objects, which it checks and builds once."""
        order = {c.id: i for i, c in enumerate(self._calls)}
        nodes = [
            {
                "id": c.id,
                "layer": c.layer,
                "module_type": c.module_type,
                "parent": c.parent,
                "order": order[c.id],
                "inputs": c.inputs,
                "outputs": c.outputs,
                "extra": c.extra,
            }
            for c in self._calls
        ]
        edges = sorted(self._edges, key=lambda e: (order[e[1]], order[e[0]]))
        return ModelGraph(nodes, [{"source": s, "target": t} for s, t in edges])
