"""The block-scaled formats in the plugin's routes, served by a real ``tensorboard``
process over runs written by the real writer: listed apart from the element formats,
never estimated (a block format that was not recorded answers 400 saying to give it to
``formats=``), and every count exactly what ``read_frame`` and the engine give."""

from __future__ import annotations

import csv
import io
import json
import math
import urllib.parse

import numpy as np
import pytest

from tandv_tb.formats import blocks as block_formats
from tandv_tb.frame import read_frame
from tandv_tb.stats import tensor_stats
from tandv_tb.writer import NumericsWriter
from tests.helpers.block_runs import (
    ACTIVATIONS,
    BLOCKS,
    FORMATS,
    MXFP4,
    STEPS,
    tensor,
    write_block_run,
    write_plain_run,
)
from tests.helpers.plugin import TensorBoardProcess, heatmap_values

P = "/data/plugin/tandv/"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("blocks")
    write_block_run(root / "blocks")
    write_plain_run(root / "plain")
    # one run, two files: layer "a" records mxfp4_e2m1, layer "b" does not
    with NumericsWriter(str(root / "mixed"), formats=("mxfp4_e2m1",)) as writer:
        for step in STEPS:
            writer.add_numerics("a", tensor("saturating", step), step)
    with NumericsWriter(str(root / "mixed"), formats=("float8_e4m3fn",)) as writer:
        for step in STEPS:
            writer.add_numerics("b", tensor("saturating", step), step)
    return root


@pytest.fixture(scope="module")
def server(logdir):
    process = TensorBoardProcess(logdir, "true")

    def ready():
        runs = process.json(P + "runs")["runs"]
        layers = [
            process.json(P + f"layers?run={r['run']}&tensor_type=Activation")["layers"]
            for r in runs
        ]
        counts = [len(layer) for layer in layers]
        steps = {layer["steps"] for found in layers for layer in found}
        return sorted(counts) == [2, 5, 5] and steps == {len(STEPS)}

    process.wait(ready, "the three runs, every step")
    yield process
    process.close()


def get(server, route: str, **params) -> tuple[int, dict | str]:
    status, body, headers = server.get(P + route + "?" + urllib.parse.urlencode(params, True))
    text = body.decode("utf-8")
    return status, json.loads(text) if "json" in headers.get("Content-Type", "") else text


def ok(server, route: str, **params):
    status, body = get(server, route, **params)
    assert status == 200, (route, params, body)
    return body


def engine(name: str, step: int, format_name: str):
    """What the engine computes for one crafted Activation (the writer's own call)."""
    return tensor_stats(tensor(name, step), FORMATS).to_record().blocks[format_name]


@pytest.fixture(scope="module")
def frames(logdir):
    out = {}
    for name in BLOCKS:
        df = read_frame(logdir, run="blocks", format=name)
        meta = df["metadata"]
        keys = zip(meta["tensor_type"], meta["name"], meta["step"])
        out[name] = {key: df.iloc[i] for i, key in enumerate(keys)}
    return out


def test_block_formats_are_listed_apart(server):
    body = ok(server, "runs")
    runs = {r["run"]: r for r in body["runs"]}
    assert runs["blocks"]["block_formats"] == sorted(BLOCKS)
    assert runs["blocks"]["formats"] == ["float8_e4m3fn"]
    assert runs["plain"]["block_formats"] == [] and runs["mixed"]["block_formats"] == ["mxfp4_e2m1"]
    listed = ok(server, "formats")
    names = [f["format"] for f in listed["block_formats"]]
    assert names == list(block_formats.with_rules())
    assert not set(names) & {f["format"] for f in listed["formats"]}
    nvfp4 = listed["block_formats"][names.index("nvfp4")]
    assert (nvfp4["element"], nvfp4["block_size"], nvfp4["scale_rule"]) == (
        "float4_e2m1fn",
        16,
        "nvfp4",
    )
    assert (nvfp4["scale_min_exponent"], nvfp4["scale_max_exponent"]) == (-6, 8)
    layers = ok(server, "layers", run="blocks", tensor_type="Activation")["layers"]
    assert all(layer["block_formats"] == list(BLOCKS) for layer in layers)
    metrics = {m["metric"]: m for m in ok(server, "metrics")["metrics"]}
    assert (
        metrics["snr_db"]["needs_block_format"]
        and metrics["clamped_block_fraction"]["needs_block_format"]
    )
    assert not metrics["underflow_fraction"]["needs_block_format"]


def test_histogram_overlays_are_exact(server, frames):
    for name in ACTIVATIONS:
        for step in (1, 5):
            body = ok(
                server, "histogram", run="blocks", tensor_type="Activation", layer=name, step=step
            )
            (layer,) = body["layers"]
            assert [f["format"] for f in layer["formats"]][:2] == ["float32", "float8_e4m3fn"]
            assert [b["format"] for b in layer["blocks"]] == list(BLOCKS)
            for shown in layer["blocks"]:
                want = engine(name, step, shown["format"]).trimmed()
                assert shown["exact"] is True
                for key in ("underflow", "overflow", "zero_blocks", "clamped_low", "clamped_high"):
                    assert shown[key] == getattr(want, key), (name, shown["format"], key)
                assert shown["blocks"] == want.blocks
                assert (shown["scale_lo"], shown["scales"]) == (want.scale_lo, want.scales.tolist())
                snr = {"Infinity": math.inf, "NaN": math.nan}.get(shown["snr_db"], shown["snr_db"])
                assert snr == want.snr_db or (math.isnan(snr) and math.isnan(want.snr_db))
                row = frames[shown["format"]][("Activation", name, step)]
                exponents = row["exponent_counts"]
                assert exponents[float("-inf")] == layer["zero_count"] + shown["underflow"]
                assert exponents[float("inf")] == shown["overflow"]  # no infinities here
    # the crafted counts, as the helper tells them
    for name, (under, over, zero, clamped) in MXFP4.items():
        (layer,) = ok(
            server, "histogram", run="blocks", tensor_type="Activation", layer=name, step=3
        )["layers"]
        mx = layer["blocks"][0]
        assert (mx["underflow"], mx["overflow"], mx["zero_blocks"], mx["clamped_low"]) == (
            under,
            over,
            zero,
            clamped,
        )


def test_histogram_formats_asked(server):
    only = ok(
        server,
        "histogram",
        run="blocks",
        tensor_type="Activation",
        layer="spiky",
        format=["float8_e5m2", "mxfp4_e2m1:rceil"],
    )["layers"][0]
    assert [f["format"] for f in only["formats"]] == ["float8_e5m2"]
    assert [b["format"] for b in only["blocks"]] == ["mxfp4_e2m1:rceil"]
    assert only["blocks"][0]["scale_rule"] == "rceil"
    elements = ok(
        server,
        "histogram",
        run="blocks",
        tensor_type="Activation",
        layer="spiky",
        format="bfloat16",
    )["layers"][0]
    assert [f["format"] for f in elements["formats"]] == ["bfloat16"]
    assert [b["format"] for b in elements["blocks"]] == list(BLOCKS)  # none named: every one
    plain = ok(server, "histogram", run="plain", tensor_type="Activation", layer="spiky")
    assert plain["layers"][0]["blocks"] == []


@pytest.mark.parametrize(
    ("route", "params", "says"),
    [
        ("histogram", {"run": "blocks", "layer": "spiky", "format": "mxfp6_e3m2"}, "formats="),
        ("histogram", {"run": "plain", "layer": "spiky", "format": "mxfp4_e2m1"}, "formats="),
        ("histogram", {"run": "blocks", "layer": "spiky", "format": "nvfp4:rceil"}, "unknown"),
        ("histogram", {"run": "blocks", "layer": "spiky", "format": "mxfp4"}, "unknown"),
        (
            "heatmap",
            {"run": "plain", "metric": "underflow_fraction", "format": "mxfp4_e2m1"},
            "formats=",
        ),
        (
            "heatmap",
            {"run": "blocks", "metric": "overflow_count", "format": "mxfp6_e2m3"},
            "formats=",
        ),
        ("heatmap", {"run": "blocks", "metric": "snr_db", "format": "float8_e4m3fn"}, "block"),
        ("heatmap", {"run": "blocks", "metric": "snr_db"}, "format"),
        ("heatmap", {"run": "blocks", "metric": "snr_db", "format": "mxfp4_e2m1:x"}, "unknown"),
        (
            "heatmap",
            {
                "run": "blocks",
                "metric": "underflow_count",
                "format": "mxfp4_e2m1",
                "minus_run": "plain",
            },
            "formats=",
        ),
        (
            "series",
            {"run": "mixed", "layer": "b", "metric": "snr_db", "format": "mxfp4_e2m1"},
            "formats=",
        ),
        ("blocks", {"run": "blocks", "layer": "spiky", "format": "float8_e4m3fn"}, "block"),
        ("blocks", {"run": "blocks", "layer": "spiky", "format": "mxfp6_e3m2"}, "formats="),
        ("blocks", {"run": "mixed", "layer": "b", "format": "mxfp4_e2m1"}, "formats="),
        ("blocks.csv", {"run": "blocks", "layer": "spiky", "format": "bf16"}, "block"),
    ],
)
def test_bad_block_format_parameters_answer_400(server, route, params, says):
    status, body = get(server, route, tensor_type="Activation", **params)
    assert status == 400, body
    assert says in body["error"], body
    if says == "formats=":
        assert "cannot be estimated" in body["error"]
        assert repr(params["format"]) in body["error"]


def test_heatmap_counts_and_shares(server):
    for metric in ("underflow_count", "overflow_count", "underflow_fraction", "overflow_fraction"):
        for name in ("mxfp4_e2m1", "nvfp4", "mxfp8_e4m3:rceil"):
            body = ok(
                server,
                "heatmap",
                run="blocks",
                tensor_type="Activation",
                metric=metric,
                format=name,
            )
            assert [c["step"] for c in body["columns"]] == list(STEPS)
            assert body["exact"] == [True] * len(ACTIVATIONS)
            cells = heatmap_values(body)
            for row, layer in zip(cells, body["layers"]):
                for step, value in zip(STEPS, row):
                    want = engine(layer["layer"], step, name)
                    count = want.underflow if metric.startswith("under") else want.overflow
                    if metric.endswith("fraction"):
                        count = np.float32(count / tensor(layer["layer"], step).size)
                    assert value == count, (metric, name, layer["layer"], step)


def test_heatmap_snr_pools_a_cells_records(server):
    body = ok(
        server,
        "heatmap",
        run="blocks",
        tensor_type="Activation",
        metric="snr_db",
        format="mxfp4_e2m1",
        columns=2,
        reduce="mean",
    )
    assert [(c["first_step"], c["last_step"]) for c in body["columns"]] == [(0, 2), (3, 5)]
    cells = heatmap_values(body)
    for row, layer in zip(cells, body["layers"]):
        for value, steps in zip(row, (range(0, 3), range(3, 6))):
            parts = [engine(layer["layer"], s, "mxfp4_e2m1") for s in steps]
            top = max(p.exponent for p in parts)
            signal = sum(math.ldexp(p.signal, 2 * (p.exponent - top)) for p in parts)
            error = sum(math.ldexp(p.error, 2 * (p.exponent - top)) for p in parts)
            want = math.inf if error == 0 else 10 * math.log10(signal / error)
            assert value == pytest.approx(want, rel=1e-6), layer["layer"]
            if layer["layer"] == "normal":  # never the mean of the steps' dB
                average = np.mean([p.snr_db for p in parts])
                assert abs(value - average) > 1e-4
    last = ok(
        server,
        "heatmap",
        run="blocks",
        tensor_type="Activation",
        metric="snr_db",
        format="mxfp4_e2m1",
        columns=2,
        reduce="last",
    )
    row = heatmap_values(last)[ACTIVATIONS.index("normal")]
    assert row == pytest.approx([engine("normal", s, "mxfp4_e2m1").snr_db for s in (2, 5)])
    series = ok(
        server,
        "series",
        run="blocks",
        tensor_type="Activation",
        layer="normal",
        metric=["snr_db", "clamped_block_fraction"],
        format="mxfp4_e2m1",
        points=2,
        reduce="max",
    )["series"]
    assert series[0]["values"] == pytest.approx(cells[ACTIVATIONS.index("normal")], rel=1e-6)
    assert series[1]["values"] == [0.0, 0.0]


def test_clamped_blocks_and_layers_without_the_format(server):
    body = ok(
        server,
        "heatmap",
        run="blocks",
        tensor_type="Activation",
        metric="clamped_block_fraction",
        format="mxfp4_e2m1",
    )
    cells = dict(zip([layer["layer"] for layer in body["layers"]], heatmap_values(body)))
    assert cells["tiny"] == [1.0] * len(STEPS) and cells["spiky"] == [0.0] * len(STEPS)
    mixed = ok(
        server,
        "heatmap",
        run="mixed",
        tensor_type="Activation",
        metric="overflow_count",
        format="mxfp4_e2m1",
    )
    rows = dict(zip([layer["layer"] for layer in mixed["layers"]], heatmap_values(mixed)))
    assert rows["a"] == [384.0] * len(STEPS)  # 7.5 saturates in every block
    assert rows["b"] == [None] * len(STEPS)  # not recorded: no data, nothing estimated


def test_blocks_route_and_its_csv(server):
    body = ok(server, "blocks", run="blocks", tensor_type="Activation", layer=["normal", "tiny"])
    assert [layer["layer"] for layer in body["layers"]] == ["normal", "tiny"]
    for layer in body["layers"]:
        assert [f["format"] for f in layer["formats"]] == list(BLOCKS)
        for shown in layer["formats"]:
            assert shown["steps"] == list(STEPS)
            for i, step in enumerate(STEPS):
                want = engine(layer["layer"], step, shown["format"])
                assert shown["underflow"][i] == want.underflow
                assert shown["overflow"][i] == want.overflow
                assert shown["blocks"][i] == want.blocks
                scales = {shown["scale_lo"] + j: c for j, c in enumerate(shown["scales"][i]) if c}
                trimmed = want.trimmed()
                assert scales == {
                    trimmed.scale_lo + j: int(c) for j, c in enumerate(trimmed.scales) if c
                }
    status, text = get(
        server,
        "blocks.csv",
        run="blocks",
        tensor_type="Activation",
        layer=["normal", "tiny"],
        format=["mxfp4_e2m1", "nvfp4"],
        step_min=2,
        step_max=4,
    )
    assert status == 200
    rows = list(csv.DictReader(io.StringIO(text)))
    header = next(csv.reader(io.StringIO(text)))
    assert header[:4] == ["run", "tensor_type", "layer", "step"]
    counts = ["underflow", "overflow", "blocks", "zero_blocks", "clamped_low", "clamped_high"]
    for name in ("mxfp4_e2m1", "nvfp4"):
        assert [f"{name}:{c}" for c in [*counts, "snr_db"]] == [
            h for h in header if h.startswith(f"{name}:") and ":scale:" not in h
        ]
    mx_scales = [int(h.split(":")[-1]) for h in header if h.startswith("mxfp4_e2m1:scale:")]
    assert mx_scales == list(range(-127, mx_scales[-1] + 1))  # tiny's clamped blocks at -127
    assert [(r["layer"], int(r["step"])) for r in rows] == [
        (layer, step) for layer in ("normal", "tiny") for step in (2, 3, 4)
    ]
    for r in rows:
        for name in ("mxfp4_e2m1", "nvfp4"):
            want = engine(r["layer"], int(r["step"]), name)
            assert int(r[f"{name}:underflow"]) == want.underflow
            assert int(r[f"{name}:clamped_low"]) == want.clamped_low
            assert float(r[f"{name}:snr_db"]) == pytest.approx(want.snr_db)
            held = {
                int(h.split(":")[-1]): int(r[h])
                for h in header
                if h.startswith(f"{name}:scale:") and int(r[h])
            }
            trimmed = want.trimmed()
            assert held == {trimmed.scale_lo + j: int(c) for j, c in enumerate(trimmed.scales) if c}
