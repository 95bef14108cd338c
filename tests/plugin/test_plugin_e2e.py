"""End to end: the ``tensorboard`` command on a free local port, once per loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tandv_tb.writer import NumericsWriter
from tests.helpers.plugin import TensorBoardProcess, make_record

LONG_STEPS = 1000


def _write(run_dir: Path, steps: range, layers: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with NumericsWriter(str(run_dir)) as writer:
        for step in steps:
            for i in range(layers):
                record = make_record(rng, "float32", ("float8_e4m3fn",))
                writer.add_record(f"layers.{i}", record, step, "Activation", "Linear", i)
                if step % 10 == 0:
                    grad = make_record(rng, "bfloat16")
                    writer.add_record(f"layers.{i}", grad, step, "Gradient", "Linear", i)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    _write(root / "long", range(LONG_STEPS), 2, 0)
    _write(root / "short", range(20), 3, 1)
    return root


P = "/data/plugin/tandv/"


@pytest.mark.parametrize("load_fast", ["true", "false"])
def test_tensorboard_serves_the_numerics_tab(logdir, load_fast):
    server = TensorBoardProcess(logdir, load_fast)
    try:
        listing = server.wait(
            lambda: (
                server.json("/data/plugins_listing")["tandv"]["enabled"]
                and server.json("/data/plugins_listing")
            ),
            "the tandv plugin to be enabled",
        )
        assert listing["tandv"]["tab_name"] == "Numerics"

        def long_run_loaded():
            layers = server.json(P + "layers?run=long&tensor_type=Activation")["layers"]
            return all(layer["steps"] == LONG_STEPS for layer in layers) and layers

        layers = server.wait(long_run_loaded, "1,000 steps of the long run")
        assert [layer["layer"] for layer in layers] == ["layers.0", "layers.1"]
        heatmap = server.json(
            P + "heatmap?run=long&tensor_type=Activation&metric=log2_rm2&columns=10000"
        )
        assert [c["step"] for c in heatmap["columns"]] == list(range(LONG_STEPS))

        routes = [
            "runs",
            "formats",
            "metrics",
            "layers?run=short&tensor_type=Gradient",
            "steps?run=short&tensor_type=Gradient",
            "histogram?run=short&tensor_type=Activation&layer=layers.0&layer=layers.2&step=7",
            "heatmap?run=short&tensor_type=Activation&metric=underflow_fraction"
            "&format=float8_e5m2&columns=5",
            "series?run=short&tensor_type=Activation&layer=layers.1&metric=mean&metric=rm2",
            "scalars?run=short",
            "layers.csv?run=short&tensor_type=Activation",
            "histogram.csv?run=short&tensor_type=Activation&layer=layers.0",
            "heatmap.csv?run=short&tensor_type=Activation&metric=mean",
            "series.csv?run=short&tensor_type=Activation&layer=layers.1&metric=mean",
            "scalars.csv?run=short",
            "static/index.js",
        ]
        for route in routes:
            status, body, headers = server.get(P + route)
            assert status == 200, (route, body[:300])
            assert headers["X-Content-Type-Options"] == "nosniff"
        status, _, headers = server.get(P + "static/index.js")
        assert headers["Content-Type"].startswith("text/javascript")
        status, body, _ = server.get(P + "heatmap?run=short&tensor_type=Activation&metric=x")
        assert status == 400 and b"'x'" in body

        # A run still being written: new steps appear after TensorBoard's next reload.
        last = server.json(P + "steps?run=short&tensor_type=Activation")["steps"][-1]
        _write(logdir / "short", range(last + 1, last + 6), 3, last)
        server.wait(
            lambda: (
                server.json(P + "steps?run=short&tensor_type=Activation")["steps"][-1] == last + 5
            ),
            "new steps of the short run",
            timeout=60,
        )
    finally:
        server.close()
