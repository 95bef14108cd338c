"""The model's graph as recorded: its module calls, their shapes, and the dataflow between
them (``ModelGraph``), and its record in the event file.

The record is one value of the tag ``tandv/_graph`` (plugin ``tandv``,
``DATA_CLASS_TENSOR``, plugin content ``{"version": 1, "kind": "graph"}``), written once
per run and again whenever the graph changes (the last one written is the run's graph).
Its tensor is a 0-d ``DT_STRING`` holding UTF-8 JSON::

    {"nodes": [{"id": "blocks.0.attn#0", "layer": "blocks.0.attn",
                "module_type": "Attention", "parent": "blocks.0#0", "order": 5,
                "inputs": [{"shape": [8, 64, 128], "dtype": "float32"}],
                "outputs": [{"shape": [8, 64, 128], "dtype": "float32"}],
                "extra": {"extra_repr": "...", "parameters": [...]}}, ...],
     "edges": [{"source": "blocks.0.ln_1#0", "target": "blocks.0.attn#0"}, ...]}

A node is one call of a module (a module called twice is two nodes):

- ``id``: unique in the graph; by convention ``invocation_id(layer, k)``, ``<layer>#<k>``
  for the module's k-th call (from 0) in the recorded forward pass;
- ``layer``: the module's recorded name, as the numerics name it (``blocks.0.attn``; the
  root module is its class name), so that a node finds its numerics;
- ``module_type``: the module's class name;
- ``parent``: the ``id`` of the call during which this call ran (the enclosing module's),
  null for a call at the top: the module tree, as it ran;
- ``order``: where the call began in the forward pass (0 first), an int >= 0;
- ``inputs``, ``outputs``: the tensors it took and returned, in order, each
  ``{"shape": [ints >= 0], "dtype": str}`` (dtypes as numpy spells them: ``float32``,
  ``bfloat16``); values that are not tensors are left out;
- ``extra``: a JSON object; the trackers put ``extra_repr`` (str) and ``parameters``
  (``[{"name": str, "shape": [...], "dtype": str}]``, the module's own) there.

An edge says an output of ``source`` reaches an input of ``target``, possibly through code
outside any module in between (a residual addition, a reshape); both are node ids. Edges
may join calls at any depth (a block's output to the first layer of the next block): a
reader that shows the graph collapsed lifts each edge to the visible enclosing calls.

A plugin content of a newer version is refused with ``UnsupportedVersion`` (upgrade
tandv_tb), a malformed record with ``ValueError`` saying what is wrong; readers skip it,
say why, and never fail over it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping

from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from tandv_tb.event_files.metadata import (
    GRAPH_KIND,
    PLUGIN_NAME,
    plugin_content,
    plugin_metadata,
    plugin_version,
)

#: The tag of the graph's record (one per run; the last one written is the run's graph).
GRAPH_TAG = f"{PLUGIN_NAME}/_graph"
#: The newest version of the graph's record this tandv_tb reads and writes.
GRAPH_VERSION = 1


class GraphError(ValueError):
    """A graph (given, or read from a record) that is not one: the message says where."""


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """The shape and dtype of one tensor a call took or returned."""

    shape: tuple[int, ...]
    dtype: str


@dataclasses.dataclass(frozen=True)
class GraphNode:
    """One call of a module (see the module's doc for each field)."""

    id: str
    layer: str
    module_type: str
    parent: str | None
    order: int
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    extra: Mapping[str, object] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class GraphEdge:
    """An output of the call ``source`` reaches an input of the call ``target``."""

    source: str
    target: str


@dataclasses.dataclass(frozen=True)
class ModelGraph:
    """A model's module calls and the dataflow between them, checked whole when built
    (``GraphError`` naming the first problem): unique ids, parents and edge ends that are
    nodes of the graph, no call enclosing itself."""

    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(_node(n, i) for i, n in enumerate(self.nodes)))
        object.__setattr__(self, "edges", tuple(_edge(e, i) for i, e in enumerate(self.edges)))
        _check_links(self.nodes, self.edges)

    @classmethod
    def from_json(cls, data: object) -> ModelGraph:
        """The graph of a JSON object ``{"nodes": [...], "edges": [...]}`` (as written in the
        record and answered by the ``graph`` route), checked."""
        if not isinstance(data, Mapping):
            raise GraphError(f"graph: expected an object, got {type(data).__name__}")
        unknown = set(data) - {"nodes", "edges"}
        if unknown:
            raise GraphError(f"graph: unknown keys {sorted(map(str, unknown))}")
        return cls(_items(data.get("nodes"), "nodes"), _items(data.get("edges", []), "edges"))

    def to_json(self) -> dict:
        """The graph as a JSON object (``from_json`` gives it back)."""
        return {
            "nodes": [
                {
                    "id": n.id,
                    "layer": n.layer,
                    "module_type": n.module_type,
                    "parent": n.parent,
                    "order": n.order,
                    "inputs": [_spec_json(s) for s in n.inputs],
                    "outputs": [_spec_json(s) for s in n.outputs],
                    "extra": dict(n.extra),
                }
                for n in self.nodes
            ],
            "edges": [{"source": e.source, "target": e.target} for e in self.edges],
        }


def invocation_id(layer: str, call: int) -> str:
    """The conventional id of the ``call``-th call (from 0) of the module ``layer``."""
    return f"{layer}#{call}"


def as_graph(graph: ModelGraph | Mapping) -> ModelGraph:
    """``graph`` itself, or the graph of its JSON object (``ModelGraph.from_json``)."""
    return graph if isinstance(graph, ModelGraph) else ModelGraph.from_json(graph)


# -- the record ----------------------------------------------------------------------------
def encode_graph(graph: ModelGraph | Mapping) -> summary_pb2.Summary.Value:
    """The summary value of a graph (a ``ModelGraph`` or its JSON object; ``GraphError``
    for one that is not a graph)."""
    text = json.dumps(as_graph(graph).to_json(), ensure_ascii=False, separators=(",", ":"))
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        string_val=[text.encode("utf-8")],
    )
    metadata = plugin_metadata({"version": GRAPH_VERSION, "kind": GRAPH_KIND})
    return summary_pb2.Summary.Value(tag=GRAPH_TAG, metadata=metadata, tensor=tensor)


def check_graph_content(content: bytes) -> None:
    """Refuse a graph record's plugin content of a newer version (``UnsupportedVersion``)
    or a malformed one (``ValueError``)."""
    plugin_version(plugin_content(content), GRAPH_VERSION, "this graph was")


def decode_graph(tensor: tensor_pb2.TensorProto, content: bytes) -> ModelGraph:
    """The graph of one value (its tensor, and its plugin content); ``UnsupportedVersion``
    for a newer record, ``ValueError`` (``GraphError`` for the graph itself) saying what
    is malformed."""
    check_graph_content(content)
    if tensor.dtype != types_pb2.DT_STRING:
        raise GraphError(f"graph record: expected a DT_STRING tensor, got dtype {tensor.dtype}")
    if tensor.tensor_shape.dim or len(tensor.string_val) != 1:
        raise GraphError(
            "graph record: expected one string (a 0-d tensor), got shape "
            f"{[d.size for d in tensor.tensor_shape.dim]} holding {len(tensor.string_val)}"
        )
    try:
        data = json.loads(tensor.string_val[0].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise GraphError(f"graph record: not UTF-8 JSON ({error})") from None
    except RecursionError:
        raise GraphError("graph record: JSON nested too deeply") from None
    return ModelGraph.from_json(data)


# -- checks --------------------------------------------------------------------------------
def _items(value: object, what: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise GraphError(f"graph: {what!r} should be a list, got {type(value).__name__}")
    return list(value)


def _text(value: object, where: str, field: str, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        wanted = "a string" if empty else "a non-empty string"
        raise GraphError(f"{where}: {field!r} should be {wanted}, got {value!r}")
    return value


def _count(value: object, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GraphError(f"{where}: {field!r} should be an int >= 0, got {value!r}")
    return value


def _spec(item: object, where: str) -> TensorSpec:
    if isinstance(item, TensorSpec):
        if type(item.dtype) is str and item.dtype and _dims(item.shape):  # as built
            return item
        item = {"shape": item.shape, "dtype": item.dtype}
    if not isinstance(item, Mapping) or set(item) != {"shape", "dtype"}:
        raise GraphError(f'{where}: expected {{"shape": [...], "dtype": str}}, got {item!r}')
    shape = item["shape"]
    if not isinstance(shape, (list, tuple)):
        raise GraphError(f"{where}: 'shape' should be a list of ints >= 0, got {shape!r}")
    dims = tuple(_count(d, where, "shape") for d in shape)
    return TensorSpec(dims, _text(item["dtype"], where, "dtype"))


def _dims(shape: object) -> bool:
    """Whether ``shape`` is a tuple of ints >= 0 (the quick check of a ``TensorSpec``)."""
    return type(shape) is tuple and all(type(d) is int and d >= 0 for d in shape)


def _spec_json(spec: TensorSpec) -> dict:
    return {"shape": list(spec.shape), "dtype": spec.dtype}


def _specs(value: object, where: str, field: str) -> tuple[TensorSpec, ...]:
    if not isinstance(value, (list, tuple)):
        raise GraphError(f"{where}: {field!r} should be a list, got {type(value).__name__}")
    return tuple(_spec(item, f"{where} {field}[{i}]") for i, item in enumerate(value))


def _extra(value: object, where: str) -> dict:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise GraphError(f"{where}: 'extra' should be an object with string keys, got {value!r}")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise GraphError(f"{where}: 'extra' should hold JSON values only ({error})") from None
    return dict(value)


_NODE_FIELDS = {f.name for f in dataclasses.fields(GraphNode)}
_REQUIRED = ("id", "layer", "module_type", "parent", "order")


def _node(item: object, index: int) -> GraphNode:
    """One node, checked (from a ``GraphNode`` or its JSON object)."""
    if isinstance(item, GraphNode):
        item = dict(vars(item))
    if not isinstance(item, Mapping):
        raise GraphError(f"graph node {index}: expected an object, got {type(item).__name__}")
    node_id = item.get("id")
    where = f"graph node {index}" + (f" ({node_id!r})" if isinstance(node_id, str) else "")
    missing = [field for field in _REQUIRED if field not in item]
    if missing:
        raise GraphError(f"{where}: missing {missing}")
    unknown = sorted(map(str, set(item) - _NODE_FIELDS))
    if unknown:
        raise GraphError(f"{where}: unknown keys {unknown}")
    parent = item["parent"]
    return GraphNode(
        id=_text(item["id"], where, "id"),
        layer=_text(item["layer"], where, "layer"),
        module_type=_text(item["module_type"], where, "module_type", empty=True),
        parent=None if parent is None else _text(parent, where, "parent"),
        order=_count(item["order"], where, "order"),
        inputs=_specs(item.get("inputs", ()), where, "inputs"),
        outputs=_specs(item.get("outputs", ()), where, "outputs"),
        extra=_extra(item.get("extra", {}), where),
    )


def _edge(item: object, index: int) -> GraphEdge:
    if isinstance(item, GraphEdge):
        item = dataclasses.asdict(item)
    where = f"graph edge {index}"
    if not isinstance(item, Mapping) or set(item) != {"source", "target"}:
        raise GraphError(f'{where}: expected {{"source": id, "target": id}}, got {item!r}')
    return GraphEdge(_text(item["source"], where, "source"), _text(item["target"], where, "target"))


def _check_links(nodes: Iterable[GraphNode], edges: Iterable[GraphEdge]) -> None:
    """Unique ids; parents and edge ends among them; no call enclosing itself."""
    parents: dict[str, str | None] = {}
    for node in nodes:
        if node.id in parents:
            raise GraphError(f"graph: two nodes have the id {node.id!r}")
        parents[node.id] = node.parent
    for node_id, parent in parents.items():
        if parent is not None and parent not in parents:
            raise GraphError(f"graph node {node_id!r}: its parent {parent!r} is no node")
    for index, edge in enumerate(edges):
        for end in (edge.source, edge.target):
            if end not in parents:
                raise GraphError(f"graph edge {index}: {end!r} is no node of the graph")
    settled: set[str] = set()  # nodes whose chain of parents reaches the top
    for start in parents:
        chain: dict[str, None] = {}
        node: str | None = start
        while node is not None and node not in settled:
            if node in chain:
                raise GraphError(f"graph node {node!r} encloses itself (a cycle of parents)")
            chain[node] = None
            node = parents[node]
        settled.update(chain)


@dataclasses.dataclass(frozen=True)
class GraphRecord:
    """One graph record as read: its step, and its graph, or why it could not be read."""

    step: int
    graph: ModelGraph | None
    problem: str | None = None


def read_graph_value(tensor: tensor_pb2.TensorProto, content: bytes, step: int) -> GraphRecord:
    """The record of one value (``decode_graph``), its problem kept instead of raised."""
    try:
        return GraphRecord(step, decode_graph(tensor, content))
    except ValueError as error:  # GraphError, UnsupportedVersion
        return GraphRecord(step, None, str(error))
