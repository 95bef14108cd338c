"""The plugin's routes as HTTP: bad requests named, methods, headers and gzip, the tab's listing."""

from __future__ import annotations

import pytest
from tensorboard import program

from tandv_tb.plugin import DEFAULT_SAMPLES
from tests.helpers.plugin import PREFIX, TensorBoardApp, plugin_loaders

# The logdir and the TensorBoard apps (``logdir``, ``tb``): tests/plugin/conftest.py.


# -- bad requests ------------------------------------------------------------------------
BAD = [
    ("layers", {"run": "nope", "tensor_type": "Activation"}, 404, "nope"),
    ("layers", {"run": "alpha"}, 400, "tensor_type"),
    ("layers", {"run": "alpha", "tensor_type": "Bogus"}, 404, "Bogus"),
    ("layers", {"tensor_type": "Activation"}, 400, "run"),
    ("histogram", {"run": "alpha", "tensor_type": "Activation"}, 400, "layer"),
    ("histogram", {"run": "alpha", "tensor_type": "Activation", "layer": "x.y"}, 404, "x.y"),
    (
        "histogram",
        {"run": "alpha", "tensor_type": "Activation", "layer": "embed", "step": "-3"},
        400,
        "step",
    ),
    (
        "histogram",
        {"run": "alpha", "tensor_type": "Activation", "layer": "embed", "step": "1e3"},
        400,
        "step",
    ),
    (
        "histogram",
        {"run": "alpha", "tensor_type": "Activation", "layer": "embed", "format": "int8"},
        400,
        "int8",
    ),
    ("heatmap", {"run": "alpha", "tensor_type": "Activation", "metric": "nope"}, 400, "nope"),
    ("heatmap", {"run": "alpha", "tensor_type": "Activation"}, 400, "metric"),
    (
        "heatmap",
        {"run": "alpha", "tensor_type": "Activation", "metric": "underflow_fraction"},
        400,
        "format",
    ),
    (
        "heatmap",
        {"run": "alpha", "tensor_type": "Activation", "metric": "mean", "columns": "0"},
        400,
        "columns",
    ),
    (
        "heatmap",
        {"run": "alpha", "tensor_type": "Activation", "metric": "mean", "reduce": "median"},
        400,
        "reduce",
    ),
    (
        "heatmap",
        {"run": "alpha", "tensor_type": "Activation", "metric": "mean", "layer_regex": "("},
        400,
        "layer_regex",
    ),
    (
        "heatmap",
        {
            "run": "alpha",
            "tensor_type": "Activation",
            "metric": "mean",
            "step_min": "9",
            "step_max": "2",
        },
        400,
        "step_min",
    ),
    ("series", {"run": "alpha", "tensor_type": "Weight", "layer": "embed"}, 400, "metric"),
    ("scalars", {"run": "nope"}, 404, "nope"),
    ("scalars", {"run": "alpha", "tag": "accuracy"}, 404, "accuracy"),
    ("heatmap.csv", {"run": "nope", "tensor_type": "Activation", "metric": "mean"}, 404, "nope"),
    ("no_such_route", {}, 404, "no_such_route"),
    ("static/../plugin/plugin.py", {}, 404, "static"),
]


@pytest.mark.parametrize("route, params, status, named", BAD)
def test_bad_requests_name_the_problem(tb, route, params, status, named):
    response = tb.get(route, **params)
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert named in response.get_json()["error"]


def test_repeated_single_parameter_and_wrong_method(tb):
    response = tb.client.get(
        "/data/plugin/tandv/layers?run=alpha&run=nested/beta&tensor_type=Weight"
    )
    assert response.status_code == 400 and "once" in response.get_json()["error"]
    posted = tb.client.post("/data/plugin/tandv/runs")
    assert posted.status_code == 405


# -- TensorBoard integration -------------------------------------------------------------
def test_plugins_listing_shows_the_numerics_tab(tb):
    listing = tb.client.get("/data/plugins_listing").get_json()
    assert listing["tandv"]["enabled"] is True
    assert listing["tandv"]["tab_name"] == "Numerics"
    mechanism = listing["tandv"]["loading_mechanism"]
    assert mechanism == {"type": "IFRAME", "module_path": "/data/plugin/tandv/static/index.js"}


def test_the_tab_is_disabled_without_numerics(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path / "run")) as writer:
        writer.add_scalar("loss", 1.0, 0)
    app = TensorBoardApp(tmp_path, "python")
    try:
        assert app.client.get("/data/plugins_listing").get_json()["tandv"]["enabled"] is False
        assert app.json("runs")["runs"] == []
    finally:
        app.close()


def test_samples_per_plugin_default_and_user_flag(tmp_path):
    tb = program.TensorBoard(plugins=plugin_loaders())
    tb.configure(argv=["tensorboard", f"--logdir={tmp_path}"])
    assert tb.flags.samples_per_plugin["tandv"] == DEFAULT_SAMPLES == 1  # the store has all
    tb = program.TensorBoard(plugins=plugin_loaders())
    tb.configure(argv=["tensorboard", f"--logdir={tmp_path}", "--samples_per_plugin=tandv=5"])
    assert tb.flags.samples_per_plugin["tandv"] == 5


def test_the_heatmap_is_sent_without_gzip_and_other_json_with_it(tb):
    gzip = {"Accept-Encoding": "gzip"}
    params = {"run": "alpha", "tensor_type": "Activation", "metric": "mean"}
    heat = tb.client.get(PREFIX + "heatmap", query_string=params, headers=gzip)
    assert heat.status_code == 200 and "Content-Encoding" not in heat.headers
    assert heat.headers["Content-Type"] == "application/json"
    assert heat.headers["X-Content-Type-Options"] == "nosniff"
    assert heat.headers["Cache-Control"] == "no-cache, must-revalidate"
    assert heat.get_json()["values"]["dtype"] == "float32"
    head = tb.client.head(PREFIX + "heatmap", query_string=params)
    assert head.status_code == 200 and head.get_data() == b""
    layers = tb.client.get(PREFIX + "layers", query_string=params, headers=gzip)
    assert layers.headers["Content-Encoding"] == "gzip"
