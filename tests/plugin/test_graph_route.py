"""The ``graph`` route through TensorBoard's real WSGI app (both loaders): a run's last
graph, an empty graph for a run without one, damaged and foreign records skipped with their
reason (never a 5xx), hostile names returned as data, errors for bad requests."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2

from tandv_tb.event_files.event_file import EventFile
from tandv_tb.event_files.graph_record import encode_graph
from tandv_tb.writer import NumericsWriter
from tests.helpers.model_graphs import HOSTILE, gpt_graph, residual_graph
from tests.helpers.plugin import TensorBoardApp

STEPS = 4


def _numerics(writer: NumericsWriter, step: int) -> None:
    writer.add_numerics("embed", np.full(16, step + 1.0, np.float32), step)


def _write_value(run_dir, step: int, value: summary_pb2.Summary.Value) -> None:
    EventFile(str(run_dir)).write(
        event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[value]))
    )


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """Runs: ``graph`` (recorded at step 0, changed at step 2), ``plain`` (none),
    ``damaged`` (a good graph, then a malformed one), ``foreign`` (only a record of a newer
    version), ``only_graph`` (a graph and no numerics)."""
    root = tmp_path_factory.mktemp("graphs")
    with NumericsWriter(str(root / "graph")) as writer:
        for step in range(STEPS):
            _numerics(writer, step)
            writer.add_graph(residual_graph() if step < 2 else gpt_graph(2), step=step)
    with NumericsWriter(str(root / "plain")) as writer:
        for step in range(STEPS):
            _numerics(writer, step)
    with NumericsWriter(str(root / "damaged")) as writer:
        _numerics(writer, 0)
        writer.add_graph(residual_graph(), step=0)
    bad = encode_graph(residual_graph())
    bad.tensor.string_val[0] = b'{"nodes": "none", "edges": []}'
    _write_value(root / "damaged", 1, bad)
    with NumericsWriter(str(root / "foreign")) as writer:
        _numerics(writer, 0)
    newer = encode_graph(gpt_graph(1))
    newer.metadata.plugin_data.content = b'{"version": 7, "kind": "graph"}'
    _write_value(root / "foreign", 0, newer)
    with NumericsWriter(str(root / "only_graph")) as writer:
        writer.add_graph(gpt_graph(1))
    return root


@pytest.fixture(scope="module", params=["python", "rust"])
def tb(request, logdir):
    app = TensorBoardApp(logdir, request.param)
    app.wait_for(tags=4, max_step=STEPS - 1)
    yield app
    app.close()


def test_a_run_answers_its_last_graph_node_by_node_and_edge_by_edge(tb):
    body = tb.json("graph", run="graph")
    expected = gpt_graph(2)
    assert body["run"] == "graph" and body["step"] == 2 and body["skipped"] == []
    assert body["nodes"] == expected["nodes"]
    assert body["edges"] == expected["edges"]
    node = next(n for n in body["nodes"] if n["id"] == "blocks.1.mlp.c_fc#0")
    assert node["layer"] == "blocks.1.mlp.c_fc" and node["parent"] == "blocks.1.mlp#0"
    assert node["inputs"] == [{"shape": [2, 16, 32], "dtype": "float32"}]


def test_names_with_html_are_returned_as_data(tb, tmp_path):
    # ``damaged`` serves residual_graph, which holds a module named HOSTILE
    body = tb.json("graph", run="damaged")
    assert body["nodes"] == residual_graph()["nodes"]
    hostile = [n for n in body["nodes"] if n["layer"] == HOSTILE]
    assert hostile[0]["module_type"] == "名前\"'\\"
    response = tb.get("graph", run="damaged")
    assert response.headers["Content-Type"].startswith("application/json")


def test_a_run_without_a_graph_answers_empty_lists(tb):
    body = tb.json("graph", run="plain")
    assert body == {"run": "plain", "step": None, "nodes": [], "edges": [], "skipped": []}


def test_a_damaged_record_is_skipped_with_its_reason_and_the_last_good_graph_served(tb):
    body = tb.json("graph", run="damaged")
    assert body["step"] == 0 and len(body["nodes"]) == len(residual_graph()["nodes"])
    assert [s["step"] for s in body["skipped"]] == [1]
    assert "'nodes' should be a list" in body["skipped"][0]["reason"]


def test_a_foreign_record_gives_an_empty_graph_and_says_why(tb):
    body = tb.json("graph", run="foreign")
    assert (body["nodes"], body["edges"], body["step"]) == ([], [], None)
    (skipped,) = body["skipped"]
    assert skipped["step"] == 0 and "version 7" in skipped["reason"]
    assert "upgrade tandv_tb" in skipped["reason"]


@pytest.mark.parametrize(
    "params, status",
    [
        ({"run": "nothing"}, 404),
        ({"run": "only_graph"}, 404),  # no numerics: not a run of the tab
        ({}, 400),
        ({"run": ""}, 400),
        ({"run": ["graph", "plain"]}, 400),
    ],
)
def test_bad_requests_answer_a_clear_error(tb, params, status):
    response = tb.get("graph", **params)
    assert response.status_code == status, response.get_data(as_text=True)
    assert json.loads(response.get_data())["error"]
