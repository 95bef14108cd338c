"""Damaged numerics through real TensorBoard (both loaders): the plugin serves what it can
read, says what it skipped, never answers 5xx; old (version 1) data read as new ones."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from tensorboard.compat.proto import summary_pb2, tensor_pb2, types_pb2

from tandv_tb.event_files import record_columns, summary
from tandv_tb.event_files.metadata import TagInfo
from tandv_tb.frame import read_frame
from tandv_tb.writer import NumericsWriter
from tests.helpers.event_io import event_files, tensor_proto, write_raw_events
from tests.helpers.plugin import TensorBoardApp, heatmap_values, make_record

STEPS = 6
FORMATS = ("float8_e4m3fn",)


def _value(info: TagInfo, tensor: tensor_pb2.TensorProto, first: bool, content=None):
    value = summary_pb2.Summary.Value(tag=info.tag, tensor=tensor)
    if first:
        value.metadata.CopyFrom(info.to_metadata())
        if content is not None:
            value.metadata.plugin_data.content = content
    return value


def _version_1(info: TagInfo, vector: np.ndarray, first: bool):
    """A step as tandv_tb wrote it before version 2: ``int64_val`` and version 1 metadata."""
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64, int64_val=vector.tolist())
    tensor.tensor_shape.dim.add(size=len(vector))
    content = json.loads(info.to_metadata().plugin_data.content)
    return _value(info, tensor, first, json.dumps({**content, "version": 1}).encode())


def _write_damaged_run(run_dir, rng) -> None:
    """One run holding: a good layer, an old (version 1) layer, a layer whose tensors have
    the wrong shape or dtype, a layer with some malformed steps, a future version and a
    malformed metadata."""
    info = {
        name: TagInfo(name, "Activation", "Linear", i, FORMATS)
        for i, name in enumerate(["good", "old", "wrong_shape", "some_bad", "future", "garbage"])
    }
    values = []
    for step in range(STEPS):
        first = step == 0
        vectors = {
            name: summary.encode_record(make_record(rng, "float32", FORMATS), FORMATS)
            for name in info
        }
        values.append((step, _value(info["good"], tensor_proto(vectors["good"]), first)))
        values.append((step, _version_1(info["old"], vectors["old"], first)))
        wrong = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_FLOAT if step % 2 else types_pb2.DT_INT64,
            float_val=[1.0, 2.0] if step % 2 else [],
            int64_val=[] if step % 2 else vectors["wrong_shape"].tolist(),
        )
        wrong.tensor_shape.dim.add(size=1 if step % 2 else 2)
        if not step % 2:
            wrong.tensor_shape.dim.add(size=len(vectors["wrong_shape"]) // 2 + 1)
        if step == 3:  # a damaged shape that would ask make_ndarray for 8 TB of zeros
            wrong = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64)
            wrong.tensor_shape.dim.add(size=10**12)
        values.append((step, _value(info["wrong_shape"], wrong, first)))
        bad = tensor_proto(vectors["some_bad"])
        if step == 2:  # the last varint cut off
            bad = tensor_proto(vectors["some_bad"])
            bad.tensor_content = bad.tensor_content[:-1] + b"\x80"
        if step == 4:  # too short a vector
            bad = tensor_proto(vectors["some_bad"][:5])
        values.append((step, _value(info["some_bad"], bad, first)))
        future = json.loads(info["future"].to_metadata().plugin_data.content)
        future = json.dumps({**future, "version": 99}).encode()
        tensor = tensor_proto(vectors["future"])
        values.append((step, _value(info["future"], tensor, first, future)))
        tensor = tensor_proto(vectors["garbage"])
        values.append((step, _value(info["garbage"], tensor, first, b"{not json")))
    write_raw_events(run_dir, values)


def _write_good_run(run_dir, rng, steps: int = 40) -> None:
    with NumericsWriter(str(run_dir)) as writer:
        for step in range(steps):
            for i in range(3):
                record = make_record(rng, "bfloat16", FORMATS)
                writer.add_record(f"layers.{i}", record, step, "Gradient", "Linear", i)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged")
    rng = np.random.default_rng(0)
    _write_damaged_run(root / "damaged", rng)
    for run in ("flipped", "truncated"):
        _write_good_run(root / run, rng)
    (flipped,) = event_files(root / "flipped")
    data = bytearray(flipped.read_bytes())
    for at in range(len(data) // 3, len(data) // 3 + 4000, 500):
        data[at : at + 8] = bytes(b ^ 0xA5 for b in data[at : at + 8])
    flipped.write_bytes(bytes(data))
    (truncated,) = event_files(root / "truncated")
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size * 2 // 3 + 7])
    return root


@pytest.fixture(scope="module", params=["python", "rust"])
def tb(request, logdir):
    app = TensorBoardApp(logdir, request.param)
    app.wait_for(tags=4 + 3 + 3, max_step=STEPS - 1)
    yield app
    app.close()


def test_runs_lists_the_readable_tags_and_the_skipped_ones(tb):
    body = tb.json("runs")
    assert [r["run"] for r in body["runs"]] == ["damaged", "flipped", "truncated"]
    damaged = body["runs"][0]
    assert damaged["layer_count"] == 4 and damaged["max_step"] == STEPS - 1
    skipped = {(s["run"], s["tag"]): s["reason"] for s in body["skipped"]}
    assert set(skipped) == {
        ("damaged", "tandv/Activation/future"),
        ("damaged", "tandv/Activation/garbage"),
    }
    assert "version 99" in skipped[("damaged", "tandv/Activation/future")]
    assert "upgrade tandv_tb" in skipped[("damaged", "tandv/Activation/future")]
    assert "malformed" in skipped[("damaged", "tandv/Activation/garbage")]


def test_layers_say_which_steps_were_skipped(tb):
    body = tb.json("layers", run="damaged", tensor_type="Activation")
    steps = {layer["layer"]: layer["steps"] for layer in body["layers"]}
    assert steps == {"good": STEPS, "old": STEPS, "wrong_shape": 0, "some_bad": STEPS - 2}
    skipped = {s["layer"]: s for s in body["skipped"]}
    assert set(skipped) == {"wrong_shape", "some_bad"}
    assert skipped["wrong_shape"]["steps"] == STEPS and skipped["some_bad"]["steps"] == 2
    assert skipped["some_bad"]["tag"] == "tandv/Activation/some_bad"
    assert "2 of 6 stored steps" in skipped["some_bad"]["reason"]


def test_the_readable_data_are_served_and_old_data_read_as_read_frame_does(tb, logdir):
    with pytest.warns(Warning):
        df = read_frame(logdir, run="damaged")
    heat = tb.json("heatmap", run="damaged", tensor_type="Activation", metric="max_abs")
    names = [layer["layer"] for layer in heat["layers"]]
    assert names == ["good", "old", "wrong_shape", "some_bad"]
    rows = dict(zip(names, heatmap_values(heat)))
    assert rows["wrong_shape"] == [None] * STEPS
    assert [v is None for v in rows["some_bad"]] == [s in (2, 4) for s in range(STEPS)]
    meta, stats = df["metadata"], df["scalar_stats"]
    for name in ("good", "old"):
        expected = stats["max_abs"][meta["name"] == name].tolist()
        assert rows[name] == [float(np.float32(v)) for v in expected]
    hist = tb.json("histogram", run="damaged", tensor_type="Activation", layer="old", step=3)
    (layer,) = hist["layers"]
    row = df[(meta["name"] == "old") & (meta["step"] == 3)]
    assert layer["numel"] == int(row["scalar_stats"]["numel"].iloc[0])
    missing = tb.get("histogram", run="damaged", tensor_type="Activation", layer="wrong_shape")
    assert missing.status_code == 404 and b"no readable steps" in missing.get_data()


@pytest.mark.parametrize("run", ["flipped", "truncated"])
def test_damaged_files_give_the_steps_before_the_damage(tb, run):
    layers = tb.json("layers", run=run, tensor_type="Gradient")["layers"]
    assert [layer["layer"] for layer in layers] == ["layers.0", "layers.1", "layers.2"]
    held = [layer["steps"] for layer in layers]
    assert all(3 <= n < 40 for n in held), held
    heat = tb.json("heatmap", run=run, tensor_type="Gradient", metric="log2_rm2")
    cells = [v for row in heatmap_values(heat) for v in row if v is not None]
    assert cells and all(not math.isnan(v) for v in cells)


def test_no_route_answers_5xx_on_damaged_data(tb):
    routes = [
        ("runs", {}),
        ("layers", {"tensor_type": "Activation"}),
        ("steps", {"tensor_type": "Activation", "layer": "wrong_shape"}),
        ("histogram", {"tensor_type": "Activation", "layer": "some_bad", "step": 2}),
        (
            "heatmap",
            {
                "tensor_type": "Activation",
                "metric": "underflow_fraction",
                "format": "float8_e4m3fn",
            },
        ),
        (
            "series",
            {"tensor_type": "Activation", "layer": ["wrong_shape", "some_bad"], "metric": "mean"},
        ),
        ("heatmap.csv", {"tensor_type": "Activation", "metric": "mean"}),
        ("series.csv", {"tensor_type": "Activation", "layer": "some_bad", "metric": "rm2"}),
        ("layers.csv", {"tensor_type": "Activation"}),
        ("scalars", {}),
    ]
    for route, params in routes:
        response = tb.get(route, run="damaged", **params)
        assert response.status_code < 500, (route, response.get_data(as_text=True))
    series = tb.json(
        "series", run="damaged", tensor_type="Activation", layer="some_bad", metric="mean"
    )
    assert series["series"][0]["steps"] == [0, 1, 3, 5]


def test_version_1_tensors_decode_like_version_2():
    rng = np.random.default_rng(5)
    record = make_record(rng, "float16", FORMATS)
    vector = summary.encode_record(record, FORMATS)
    info = TagInfo("x", "Weight", formats=FORMATS)
    old = _version_1(info, vector, True).tensor
    new = tensor_proto(vector)
    from tensorboard.util import tensor_util

    decoded = [record_columns.decode_tensor(tensor_util.make_ndarray(t), info) for t in (old, new)]
    assert decoded[0] == decoded[1]
    assert dataclasses.replace(info, version=1).formats == FORMATS
