"""End to end: the ``tensorboard`` command on a free local port, once per loader."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tandv_tb.writer import NumericsWriter
from tests.plugin_helpers import make_record

LONG_STEPS = 1000


def _tensorboard_command() -> list[str]:
    found = [
        ep
        for ep in importlib.metadata.entry_points(group="tensorboard_plugins")
        if ep.name == "tandv"
    ]
    assert found, "the tensorboard_plugins entry point 'tandv' is not installed (pip install -e .)"
    script = Path(sys.executable).with_name("tensorboard")
    return [str(script)] if script.exists() else [shutil.which("tensorboard")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


class Server:
    """A ``tensorboard`` process; ``get`` fetches a path and returns (status, body)."""

    def __init__(self, logdir: Path, load_fast: str):
        self.port = _free_port()
        self.log = open(logdir.parent / f"tb_{load_fast}_{self.port}.log", "w+")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                *_tensorboard_command(),
                f"--logdir={logdir}",
                "--host=127.0.0.1",
                f"--port={self.port}",
                f"--load_fast={load_fast}",
                "--reload_interval=1",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        )

    def get(self, path: str, timeout: float = 30) -> tuple[int, bytes, dict]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, error.read(), dict(error.headers)

    def json(self, path: str):
        status, body, _ = self.get(path)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def wait(self, predicate, what: str, timeout: float = 90):
        deadline = time.time() + timeout
        while True:
            if self.process.poll() is not None:
                self.log.seek(0)
                pytest.fail(f"tensorboard exited: {self.log.read()[-3000:]}")
            try:
                result = predicate()
                if result:
                    return result
            except (OSError, AssertionError, KeyError, ValueError):
                pass
            if time.time() > deadline:
                self.log.seek(0)
                pytest.fail(f"timed out waiting for {what}: {self.log.read()[-3000:]}")
            time.sleep(0.3)

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


P = "/data/plugin/tandv/"


@pytest.mark.parametrize("load_fast", ["true", "false"])
def test_tensorboard_serves_the_numerics_tab(logdir, load_fast):
    server = Server(logdir, load_fast)
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
