"""The plugin's data routes in TensorBoard's real WSGI app, both loaders, equal to read_frame's."""

from __future__ import annotations

import csv
import io
import math
import warnings

import numpy as np
import pytest

from tandv_tb import formats as fmt
from tandv_tb.frame import read_frame
from tests.helpers.plugin import LAYERS, STEPS, TYPES, heatmap_values

# The logdir and the TensorBoard apps (``logdir``, ``tb``): tests/plugin/conftest.py.


@pytest.fixture(scope="module")
def frame(logdir):
    df = read_frame(logdir[0])
    meta = df["metadata"]
    keys = zip(meta["run"], meta["tensor_type"], meta["name"], meta["step"])
    return {key: i for i, key in enumerate(keys)}, df


def _row(frame, run, tensor_type, layer, step):
    rows, df = frame
    return df.iloc[rows[(run, tensor_type, layer, step)]]


def _number(value):
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, value)


def _same(a, b) -> bool:
    a, b = _number(a), _number(b)
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or a == b


def _as_sent(body: dict, value: float) -> float:
    """``value`` as the heatmap sends it: rounded to float32 unless the body is float64."""
    return value if body["values"]["dtype"] == "float64" else float(np.float32(value))


# -- metadata routes ---------------------------------------------------------------------
def test_runs(tb):
    body = tb.json("runs")
    assert [r["run"] for r in body["runs"]] == ["alpha", "nested/beta"]
    alpha = body["runs"][0]
    assert alpha["tensor_types"] == list(TYPES)
    assert alpha["formats"] == ["float16", "float8_e4m3fn", "float8_e5m2"]
    assert alpha["layer_count"] == len(LAYERS) and alpha["max_step"] == STEPS - 1
    assert body["scalar_runs"] == ["alpha"]


def test_layers_in_model_order_with_dtype_and_steps(tb, logdir):
    layout = logdir[1]
    body = tb.json("layers", run="alpha", tensor_type="Gradient")
    assert [row["layer"] for row in body["layers"]] == list(LAYERS)
    for row in body["layers"]:
        steps = layout.steps("alpha", "Gradient", row["layer"])
        assert row["dtype"] == "bfloat16" and row["formats"] == []
        assert (row["steps"], row["first_step"], row["last_step"]) == (
            len(steps),
            steps[0],
            steps[-1],
        )
        assert row["module_type"] == layout.module_types[row["layer"]]
    weights = tb.json("layers", run="nested/beta", tensor_type="Weight")["layers"]
    assert [w["formats"] for w in weights] == [["float8_e5m2", "float16"]] * 3


def test_steps(tb, logdir):
    body = tb.json("steps", run="alpha", tensor_type="Optimiser_State.exp_avg")
    assert body["steps"] == list(range(0, STEPS, 7))
    one = tb.json("steps", run="alpha", tensor_type="Weight", layer="embed")
    assert one["steps"] == logdir[1].steps("alpha", "Weight", "embed")


def test_formats_and_metrics_listings(tb):
    formats = {f["format"]: f for f in tb.json("formats")["formats"]}
    e4m3 = formats["float8_e4m3fn"]
    assert (e4m3["max"], e4m3["smallest_normal"], e4m3["smallest_subnormal"]) == (
        448.0,
        2.0**-6,
        2.0**-9,
    )
    assert (e4m3["min_exponent"], e4m3["max_exponent"], e4m3["has_inf"]) == (-9, 8, False)
    metrics = {m["metric"]: m for m in tb.json("metrics")["metrics"]}
    assert metrics["log2_rm2"]["scale"] == "diverging"
    assert metrics["underflow_fraction"]["needs_format"]


# -- histogram ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tensor_type, layers, step, expected_step",
    [
        ("Activation", ["blocks.0.mlp"], 6, 6),  # NaN/Inf record
        ("Gradient", ["embed", "blocks.1.attn"], 10, 9),  # sampled away: nearest is 9
        ("Gradient", ["blocks.1.attn"], 8, 9),  # the empty record
        ("Weight", ["<img src=x onerror=1>"], 7, 5),
        ("Optimiser_State.exp_avg", ["embed"], None, 35),  # no step: the last one
    ],
)
def test_histogram_equals_read_frame(tb, frame, tensor_type, layers, step, expected_step):
    params = {"run": "alpha", "tensor_type": tensor_type, "layer": layers}
    if step is not None:
        params["step"] = step
    body = tb.json("histogram", **params)
    assert [h["layer"] for h in body["layers"]] == layers
    for hist in body["layers"]:
        row = _row(frame, "alpha", tensor_type, hist["layer"], expected_step)
        assert hist["step"] == expected_step
        assert hist["dtype"] == row["metadata"]["dtype"] == TYPES[tensor_type][0]
        counts = row["exponent_counts"]
        bins = {int(n): int(c) for n, c in counts.items() if c and not math.isinf(n)}
        sent = {hist["bins_lo"] + i: c for i, c in enumerate(hist["counts"]) if c}
        assert sent == bins
        assert hist["zero_count"] == counts[-math.inf]
        assert hist["posinf_count"] + hist["neginf_count"] == counts[math.inf]
        stats = row["scalar_stats"]
        for name in ("numel", "nan_count", "posinf_count", "neginf_count", "zero_count"):
            assert hist[name] == stats[name]
        for name, value in hist["statistics"].items():
            assert _same(value, float(stats[name])), name
        info = fmt.info(hist["dtype"])
        assert (hist["dtype_min_exponent"], hist["dtype_max_exponent"]) == (
            info.min_exponent,
            info.max_exponent,
        )


def test_histogram_formats_exact_and_estimated(tb, logdir):
    root = logdir[0]
    body = tb.json("histogram", run="alpha", tensor_type="Activation", layer="embed", step=12)
    formats = body["layers"][0]["formats"]
    assert [f["format"] for f in formats] == ["float32", "float8_e4m3fn", "float8_e5m2"]
    assert [f["exact"] for f in formats] == [True, True, False]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for entry in formats[1:]:
            df = read_frame(root, run="alpha", format=entry["format"])
            meta = df["metadata"]
            pick = (meta["name"] == "embed") & (meta["tensor_type"] == "Activation")
            row = df[pick & (meta["step"] == 12)].iloc[0]
            counts, stats = row["exponent_counts"], row["scalar_stats"]
            assert entry["underflow"] == counts[-math.inf] - stats["zero_count"]
            infinities = stats["posinf_count"] + stats["neginf_count"]
            assert entry["overflow"] == counts[math.inf] - infinities
            info = fmt.info(entry["format"])
            assert entry["max"] == info.max and entry["smallest_normal"] == info.smallest_normal
    asked = tb.json(
        "histogram",
        run="alpha",
        tensor_type="Activation",
        layer="embed",
        format=["bfloat16", "float8_e4m3fn"],
    )
    assert [f["format"] for f in asked["layers"][0]["formats"]] == ["bfloat16", "float8_e4m3fn"]


# -- heatmap and series ------------------------------------------------------------------
def _metric_value(row, metric: str) -> float:
    stats = row["scalar_stats"]
    if metric == "log2_rm2":
        with np.errstate(divide="ignore"):
            return float(np.log2(float(stats["rm2"])))
    if metric == "zero_fraction":
        return stats["zero_count"] / stats["numel"] if stats["numel"] else math.nan
    if metric == "nonfinite_count":
        return float(stats["nan_count"] + stats["posinf_count"] + stats["neginf_count"])
    return float(stats[metric])


@pytest.mark.parametrize("metric", ["log2_rm2", "max_abs", "zero_fraction", "nonfinite_count"])
def test_full_heatmap_equals_read_frame(tb, frame, logdir, metric):
    body = tb.json("heatmap", run="alpha", tensor_type="Activation", metric=metric)
    assert body["reduce"] == "max" and body["total_steps"] == STEPS
    assert [c["step"] for c in body["columns"]] == list(range(STEPS))
    assert [layer["layer"] for layer in body["layers"]] == list(LAYERS)
    for layer, values in zip(body["layers"], heatmap_values(body)):
        for step, value in enumerate(values):
            row = _row(frame, "alpha", "Activation", layer["layer"], step)
            expected = _as_sent(body, _metric_value(row, metric))
            assert _same(value, expected), (layer, step, metric)


@pytest.mark.parametrize("how", ["max", "min", "mean", "last"])
def test_heatmap_downsampling(tb, frame, how):
    body = tb.json(
        "heatmap",
        run="alpha",
        tensor_type="Gradient",
        metric="max_abs",
        columns=4,
        reduce=how,
        step_min=3,
        step_max=30,
    )
    steps = list(range(3, 31, 3))  # the recorded Gradient steps in the window: 10 of them
    assert body["total_steps"] == len(steps) and len(body["columns"]) == 4
    assert [c["count"] for c in body["columns"]] == [2, 3, 2, 3]
    groups = [steps[0:2], steps[2:5], steps[5:7], steps[7:10]]
    assert [(c["first_step"], c["last_step"]) for c in body["columns"]] == [
        (g[0], g[-1]) for g in groups
    ]
    reduce = {"max": np.max, "min": np.min, "mean": np.mean, "last": lambda v: v[-1]}[how]
    for layer, values in zip(body["layers"], heatmap_values(body)):
        for group, value in zip(groups, values):
            cells = [
                float(
                    _row(frame, "alpha", "Gradient", layer["layer"], s)["scalar_stats"]["max_abs"]
                )
                for s in group
            ]
            expected = _as_sent(body, float(reduce(np.array(cells))))
            assert _same(value, expected), (layer, group, how)


def test_heatmap_missing_cells_are_null_and_layer_filters(tb):
    body = tb.json(
        "heatmap",
        run="nested/beta",
        tensor_type="Gradient",
        metric="mean",
        layer_regex=r"^blocks\.",
        columns=1000,
        step_min=0,
        step_max=5,
    )
    assert [layer["layer"] for layer in body["layers"]] == ["blocks.0.attn", "blocks.0.mlp"]
    assert body["total_steps"] == 2
    assert body["values"]["missing"] is None  # every layer holds both steps
    named = tb.json(
        "heatmap",
        run="alpha",
        tensor_type="Activation",
        metric="mean",
        layer=["blocks.0.mlp", "embed"],
    )
    assert [layer["layer"] for layer in named["layers"]] == ["embed", "blocks.0.mlp"]


def test_heatmap_format_metrics(tb, frame):
    exact = tb.json(
        "heatmap",
        run="alpha",
        tensor_type="Activation",
        metric="underflow_count",
        format="float8_e4m3fn",
    )
    assert exact["exact"] == [True] * len(LAYERS) and exact["format"] == "float8_e4m3fn"
    estimated = tb.json(
        "heatmap",
        run="alpha",
        tensor_type="Activation",
        metric="underflow_fraction",
        format="float4_e2m1fn",
    )
    assert estimated["exact"] == [False] * len(LAYERS)
    numbers = [_number(v) for row in heatmap_values(estimated) for v in row]
    assert all(math.isnan(v) or 0 <= v <= 1 for v in numbers)
    assert any(v > 0 for v in numbers if not math.isnan(v))


def test_series_equals_read_frame(tb, frame, logdir):
    body = tb.json(
        "series",
        run="alpha",
        tensor_type="Weight",
        layer=["embed", "blocks.0.mlp"],
        metric=["mean", "zero_fraction"],
    )
    assert [(s["layer"], s["metric"]) for s in body["series"]] == [
        ("embed", "mean"),
        ("embed", "zero_fraction"),
        ("blocks.0.mlp", "mean"),
        ("blocks.0.mlp", "zero_fraction"),
    ]
    for series in body["series"]:
        assert series["steps"] == logdir[1].steps("alpha", "Weight", series["layer"])
        for step, value in zip(series["steps"], series["values"]):
            row = _row(frame, "alpha", "Weight", series["layer"], step)
            assert _same(value, _metric_value(row, series["metric"]))
    reduced = tb.json(
        "series", run="alpha", tensor_type="Weight", layer="embed", metric="mean", points=2
    )
    assert reduced["reduce"] == "max" and reduced["series"][0]["steps"] == [0, 20]


def test_scalars(tb):
    body = tb.json("scalars", run="alpha")
    assert [s["tag"] for s in body["scalars"]] == ["loss", "lr"]
    loss = body["scalars"][0]
    assert loss["steps"] == list(range(STEPS))
    assert loss["values"] == [float(np.float32(3.0 / (s + 1))) for s in range(STEPS)]
    assert tb.json("scalars", run="nested/beta")["scalars"] == []
    one = tb.json("scalars", run="alpha", tag="lr")
    assert [s["tag"] for s in one["scalars"]] == ["lr"]


# -- CSV ---------------------------------------------------------------------------------
def _csv(tb, route, **params):
    response = tb.get(route, **params)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["Content-Type"].startswith("text/csv")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "attachment" in response.headers["Content-Disposition"]
    return list(csv.reader(io.StringIO(response.get_data(as_text=True))))


def test_csv_routes_hold_the_json_data(tb):
    params = {"run": "alpha", "tensor_type": "Activation", "metric": "log2_rm2", "columns": 7}
    body = tb.json("heatmap", **params)
    table = _csv(tb, "heatmap.csv", **params)
    assert table[0] == ["layer", *(str(c["first_step"]) for c in body["columns"])]
    for row, layer, values in zip(table[1:], body["layers"], heatmap_values(body)):
        assert row[0] == layer["layer"]
        assert [float(v) for v in row[1:]] == pytest.approx(
            [_number(v) for v in values], nan_ok=True
        )
    hist = _csv(tb, "histogram.csv", run="alpha", tensor_type="Gradient", layer="embed", step=3)
    json_hist = tb.json("histogram", run="alpha", tensor_type="Gradient", layer="embed", step=3)
    layer = json_hist["layers"][0]
    assert hist[0] == ["run", "tensor_type", "layer", "step", "dtype", "bin", "count"]
    by_bin = {r[5]: int(r[6]) for r in hist[1:]}
    assert by_bin["zero"] == layer["zero_count"] and by_bin["nan"] == layer["nan_count"]
    assert sum(by_bin.values()) == layer["numel"]
    series = _csv(tb, "series.csv", run="alpha", tensor_type="Weight", layer="embed", metric="rm2")
    assert len(series) == 1 + 8 and series[1][:5] == ["alpha", "Weight", "embed", "rm2", ""]
    scalars = _csv(tb, "scalars.csv", run="alpha", tag="loss")
    assert scalars[0] == ["run", "tag", "step", "wall_time", "value"] and len(scalars) == 41
    layers = _csv(tb, "layers.csv", run="alpha", tensor_type="Weight")
    assert [r[2] for r in layers[1:]] == list(LAYERS)
