"""The model graph's on-disk record: built and checked, encoded, written by
``NumericsWriter.add_graph``, read back, and refused with a reason when damaged or foreign."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from tandv_tb.event_files import metadata
from tandv_tb.event_files.event_file import EventFile
from tandv_tb.event_files.graph_record import (
    GRAPH_TAG,
    GraphEdge,
    GraphError,
    GraphNode,
    ModelGraph,
    TensorSpec,
    decode_graph,
    encode_graph,
)
from tandv_tb.event_files.graphs import read_graph
from tandv_tb.frame import DataWarning
from tandv_tb.writer import NumericsWriter
from tests.helpers.model_graphs import gpt_graph, residual_graph


def test_json_round_trip_gives_the_same_graph_and_dataclasses_the_same_json():
    data = residual_graph()
    graph = ModelGraph.from_json(data)
    assert graph.to_json() == data
    assert graph.nodes[3] == GraphNode(
        "block.fc#0",
        "block.fc",
        "Linear",
        "block#0",
        3,
        (TensorSpec((4, 8), "float32"),),
        (TensorSpec((4, 8), "bfloat16"),),
        data["nodes"][3]["extra"],
    )
    assert ModelGraph(graph.nodes, graph.edges) == graph
    assert graph.edges[3] == GraphEdge("embed#0", "block#1")


def test_the_record_encodes_and_decodes_the_graph_hostile_names_included():
    value = encode_graph(residual_graph())
    assert value.tag == GRAPH_TAG == "tandv/_graph"
    assert value.metadata.plugin_data.plugin_name == "tandv"
    assert value.metadata.data_class == summary_pb2.DATA_CLASS_TENSOR
    content = value.metadata.plugin_data.content
    assert json.loads(content) == {"version": 1, "kind": "graph"}
    assert metadata.plugin_kind(content) == metadata.GRAPH_KIND
    with pytest.raises(metadata.NotNumerics):
        metadata.parse_plugin_metadata(content)
    assert value.tensor.dtype == types_pb2.DT_STRING and not value.tensor.tensor_shape.dim
    assert json.loads(value.tensor.string_val[0]) == residual_graph()
    assert decode_graph(value.tensor, content).to_json() == residual_graph()


def _graph_with(change) -> dict:
    data = residual_graph()
    change(data)
    return data


def _set(path, value):
    def change(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


@pytest.mark.parametrize(
    "change, message",
    [
        (_set(["nodes"], "x"), "'nodes' should be a list"),
        (_set(["nodes", 1], 3), "graph node 1: expected an object"),
        (_set(["nodes", 1, "id"], ""), r"node 1.*'id' should be a non-empty string"),
        (_set(["nodes", 1, "layer"], 5), r"'embed#0'.*'layer'"),
        (_set(["nodes", 1, "order"], -1), "'order' should be an int >= 0"),
        (_set(["nodes", 1, "order"], True), "'order' should be an int >= 0"),
        (_set(["nodes", 1, "order"], 1.5), "'order' should be an int >= 0"),
        (_set(["nodes", 1, "parent"], "nowhere#0"), "its parent 'nowhere#0' is no node"),
        (_set(["nodes", 2, "parent"], "block.fc#0"), "encloses itself"),
        (_set(["nodes", 0, "parent"], "Net#0"), "encloses itself"),
        (_set(["nodes", 2, "id"], "embed#0"), "two nodes have the id 'embed#0'"),
        (_set(["nodes", 1, "inputs"], {"shape": []}), "'inputs' should be a list"),
        (_set(["nodes", 1, "inputs", 0, "shape"], [2, -1]), "'shape' should be an int >= 0"),
        (_set(["nodes", 1, "inputs", 0, "shape"], "4x8"), "'shape' should be a list"),
        (_set(["nodes", 1, "outputs", 0], {"shape": [1]}), r"outputs\[0\]: expected"),
        (_set(["nodes", 1, "outputs", 0, "dtype"], ""), "'dtype'"),
        (_set(["nodes", 1, "extra"], []), "'extra' should be an object"),
        (_set(["nodes", 1, "extra"], {"x": float("nan")}), "JSON values only"),
        (_set(["nodes", 1, "extra"], {"x": object()}), "JSON values only"),
        (_set(["nodes", 1, "parnet"], None), r"unknown keys \['parnet'\]"),
        (lambda data: data["nodes"][1].pop("module_type"), r"missing \['module_type'\]"),
        (_set(["edges", 0], ["embed#0", "block#0"]), "graph edge 0: expected"),
        (_set(["edges", 0, "target"], "nowhere"), "graph edge 0: 'nowhere' is no node"),
        (_set(["edges", 0, "source"], None), "'source' should be a non-empty string"),
        (_set(["version"], 2), r"unknown keys \['version'\]"),
    ],
)
def test_a_graph_that_is_not_one_is_refused_naming_the_problem(change, message):
    with pytest.raises(GraphError, match=message):
        ModelGraph.from_json(_graph_with(change))


def test_the_gpt_graph_of_the_tests_is_a_graph():
    graph = ModelGraph.from_json(gpt_graph(blocks=3))
    assert len(graph.nodes) == 2 + 3 * 9 + 1
    assert {node.parent for node in graph.nodes if node.layer.endswith(".c_fc")} == {
        f"blocks.{b}.mlp#0" for b in range(3)
    }


def test_a_model_of_one_module_is_a_graph_of_one_node():
    graph = ModelGraph([GraphNode("f#0", "f", "", None, 0)])
    assert graph.to_json()["edges"] == []
    assert ModelGraph.from_json({"nodes": []}).nodes == ()


def _string_tensor(payload: bytes, dims=()) -> tensor_pb2.TensorProto:
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims]
    )
    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING, tensor_shape=shape, string_val=[payload] * max(1, *dims, 1)
    )


GOOD_CONTENT = b'{"version":1,"kind":"graph"}'


@pytest.mark.parametrize(
    "tensor, content, error, message",
    [
        (_string_tensor(b"\xff\xfe"), GOOD_CONTENT, GraphError, "not UTF-8 JSON"),
        (_string_tensor(b"{nodes"), GOOD_CONTENT, GraphError, "not UTF-8 JSON"),
        (_string_tensor(b"[" * 100_000), GOOD_CONTENT, GraphError, "not UTF-8 JSON|too deeply"),
        (_string_tensor(b"[1, 2]"), GOOD_CONTENT, GraphError, "expected an object"),
        (_string_tensor(b"{}", dims=(2,)), GOOD_CONTENT, GraphError, "0-d"),
        (
            tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0]),
            GOOD_CONTENT,
            GraphError,
            "DT_STRING",
        ),
        (_string_tensor(b'{"nodes": []}'), b"\xff", ValueError, "plugin metadata"),
        (_string_tensor(b'{"nodes": []}'), b'{"kind":"graph"}', ValueError, "bad version"),
        (_string_tensor(b'{"nodes": []}'), b"[" * 100_000, ValueError, "nested too deeply"),
        (
            _string_tensor(b'{"nodes": []}'),
            b'{"version":2,"kind":"graph"}',
            metadata.UnsupportedVersion,
            "version 2.*upgrade tandv_tb",
        ),
    ],
)
def test_a_damaged_or_foreign_record_is_refused_with_a_reason(tensor, content, error, message):
    with pytest.raises(error, match=message):
        decode_graph(tensor, content)


def _events(path) -> list[event_pb2.Event]:
    return [e for f in sorted(path.glob("events.*")) for e in EventFileLoader(str(f)).Load()]


def _graph_values(path):
    return [(e.step, v) for e in _events(path) for v in e.summary.value if v.tag == GRAPH_TAG]


def test_the_writer_writes_a_graph_once_and_again_when_it_changes(tmp_path):
    changed = _graph_with(_set(["nodes", 6, "module_type"], "Head"))
    with NumericsWriter(str(tmp_path / "run")) as writer:
        writer.add_numerics("embed", np.ones(8, np.float32), 0)
        writer.add_graph(ModelGraph.from_json(residual_graph()))
        writer.add_graph(residual_graph(), step=3)  # the same graph: not written again
        writer.add_numerics("embed", np.ones(8, np.float32), 5)
        writer.add_graph(changed, step=5)
    values = _graph_values(tmp_path / "run")
    assert [step for step, _ in values] == [0, 5]
    assert json.loads(values[1][1].tensor.string_val[0]) == changed
    assert read_graph(tmp_path) == {"run": ModelGraph.from_json(changed)}
    assert read_graph(tmp_path, "run")["run"].nodes[6].module_type == "Head"


def test_the_writer_refuses_a_bad_graph_before_writing_anything(tmp_path):
    with NumericsWriter(str(tmp_path / "run")) as writer:
        with pytest.raises(GraphError, match="no node"):
            writer.add_graph(_graph_with(_set(["edges", 0, "target"], "x#0")))
        with pytest.raises(TypeError, match="step must be an int"):
            writer.add_graph(residual_graph(), step="0")
    assert _graph_values(tmp_path / "run") == []
    assert read_graph(tmp_path / "run") == {}


def test_a_graph_goes_into_a_users_summary_writer_beside_its_scalars(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    summary = SummaryWriter(str(tmp_path / "run"))
    with NumericsWriter(writer=summary) as writer:
        writer.add_graph(residual_graph())
    summary.add_scalar("loss", 1.0, 0)
    summary.close()
    assert read_graph(tmp_path)["run"].to_json() == residual_graph()


def _write_value(path, step: int, value: summary_pb2.Summary.Value) -> None:
    EventFile(str(path)).write(
        event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[value]))
    )


def test_reading_skips_a_damaged_record_with_a_warning_and_keeps_the_last_good_one(tmp_path):
    run = tmp_path / "run"
    with NumericsWriter(str(run)) as writer:
        writer.add_graph(residual_graph(), step=2)
    damaged = encode_graph(residual_graph())
    damaged.tensor.string_val[0] = b'{"nodes": [{"id": 1}]}'
    newer = encode_graph(residual_graph())
    newer.metadata.plugin_data.content = b'{"version": 9, "kind": "graph"}'
    _write_value(run, 3, damaged)
    _write_value(run, 4, newer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = read_graph(tmp_path)
    assert found["run"].to_json() == residual_graph()
    messages = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    assert any("graph record of step 3" in m and "missing" in m for m in messages), messages
    assert any("step 4" in m and "upgrade tandv_tb" in m for m in messages), messages
