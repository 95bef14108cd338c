"""The heatmap's run-against-run difference (``minus_run``) through TensorBoard's real WSGI
app, checked against each run's own heatmap and against ``read_frame``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tandv_tb.frame import read_frame
from tests.helpers.plugin import LAYERS, TensorBoardApp, heatmap_values, write_logdir

STEPS = 40
SHARED = LAYERS[:3]  # the layers ``nested/beta`` holds


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("logdir")
    write_logdir(root, steps=STEPS)
    return root


@pytest.fixture(scope="module", params=["python", "rust"])
def tb(request, logdir):
    app = TensorBoardApp(logdir, request.param)
    app.wait_for(tags=32, max_step=STEPS - 1)
    yield app
    app.close()


def _cells(body) -> dict[tuple[str, int], float | None]:
    """``{(layer, column step): value}`` of a heatmap with one column per step."""
    assert all(c["count"] == 1 for c in body["columns"])
    steps = [c["step"] for c in body["columns"]]
    return {
        (layer["layer"], step): value
        for layer, row in zip(body["layers"], heatmap_values(body))
        for step, value in zip(steps, row)
    }


def _expected(a, b):
    if a is None or b is None:
        return None
    return 0.0 if a == b else a - b


def _close(got, want) -> bool:
    if got is None or want is None:
        return got is None and want is None
    if math.isnan(want):
        return math.isnan(got)
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)


@pytest.mark.parametrize("metric", ["log2_rm2", "log2_max_abs", "mean"])
def test_difference_is_each_runs_own_heatmap_subtracted(tb, metric):
    own = {
        run: _cells(tb.json("heatmap", run=run, tensor_type="Activation", metric=metric))
        for run in ("alpha", "nested/beta")
    }
    body = tb.json(
        "heatmap", run="alpha", minus_run="nested/beta", tensor_type="Activation", metric=metric
    )
    assert body["run"] == "alpha" and body["minus_run"] == "nested/beta"
    assert [layer["layer"] for layer in body["layers"]] == list(LAYERS)
    diff = _cells(body)
    for (layer, step), got in diff.items():
        want = _expected(own["alpha"][layer, step], own["nested/beta"].get((layer, step)))
        assert _close(got, want), (layer, step, got, want)
    # Layers only ``alpha`` holds have no difference at any step.
    assert all(diff[layer, step] is None for layer, step in diff if layer not in SHARED)
    assert any(v not in (None, 0.0) for (layer, _), v in diff.items() if layer in SHARED)
    finite = [v for v in diff.values() if v is not None and math.isfinite(v)]
    assert body["value_range"] == {
        "min": pytest.approx(min(finite)),
        "max": pytest.approx(max(finite)),
    }


def test_difference_against_read_frame_at_full_precision(tb, logdir):
    frame = read_frame(logdir)
    text = tb.get(
        "heatmap.csv", run="alpha", minus_run="nested/beta", tensor_type="Weight", metric="rm2"
    ).get_data(as_text=True)
    lines = [line.split(",") for line in text.strip().splitlines()]
    steps = [int(s) for s in lines[0][1:]]
    for layer, *cells in lines[1:]:
        if layer not in SHARED:
            assert all(cell == "" for cell in cells)
            continue
        for step, cell in zip(steps, cells):
            a, b = (_rm2(frame, run, layer, step) for run in ("alpha", "nested/beta"))
            want = 0.0 if a == b else a - b
            got = float(cell)
            assert (math.isnan(want) and math.isnan(got)) or got == want, (layer, step)


def _rm2(frame, run: str, layer: str, step: int) -> float:
    meta = frame["metadata"]
    chosen = (
        (meta["run"] == run)
        & (meta["tensor_type"] == "Weight")
        & (meta["name"] == layer)
        & (meta["step"] == step)
    )
    return float(frame["scalar_stats"]["rm2"][chosen].iloc[0])


def test_difference_keeps_steps_both_runs_recorded(tb):
    """A window and downsampling apply to the differences as to a run's own values."""
    body = tb.json(
        "heatmap",
        run="nested/beta",
        minus_run="alpha",
        tensor_type="Gradient",
        metric="log2_rm2",
        step_min=3,
        step_max=30,
        columns=4,
    )
    assert [layer["layer"] for layer in body["layers"]] == list(SHARED)
    assert body["total_steps"] == 10 and len(body["columns"]) == 4
    values = np.array(heatmap_values(body), dtype=float)
    assert values.shape == (3, 4)


@pytest.mark.parametrize(
    "params, status, named",
    [
        ({"minus_run": "nope"}, 404, "nope"),
        ({"minus_run": "alpha"}, 400, "minus_run"),
        ({"minus_run": ["nested/beta", "nested/beta"]}, 400, "once"),
    ],
)
def test_bad_minus_run(tb, params, status, named):
    response = tb.get("heatmap", run="alpha", tensor_type="Activation", metric="log2_rm2", **params)
    assert response.status_code == status, response.get_data(as_text=True)
    assert named in response.get_json()["error"]


def test_minus_run_without_the_tensor_type_is_404(tmp_path):
    from tandv_tb.writer import NumericsWriter

    for run, tensor_type in (("a", "Activation"), ("b", "Gradient")):
        with NumericsWriter(str(tmp_path / run)) as writer:
            writer.add_numerics("x", np.ones(4, np.float32), 0, tensor_type=tensor_type)
    app = TensorBoardApp(tmp_path, "python")
    try:
        app.wait_for(tags=2, max_step=0)
        response = app.get(
            "heatmap", run="a", minus_run="b", tensor_type="Activation", metric="mean"
        )
        assert response.status_code == 404
        assert "Activation" in response.get_json()["error"]
    finally:
        app.close()
