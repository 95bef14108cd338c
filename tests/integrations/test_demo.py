"""A shortened demo (a few steps per run, the same code path as ``make demo``)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from tensorboard.backend.event_processing import event_accumulator

import tandv_tb
from demo import make_demo
from tests.helpers.plugin import TensorBoardApp

TYPES = {"Activation", "Gradient", "Weight", "Weight_Gradient"}


def assert_graphs(logdir, frame) -> None:
    """The trackers' runs answer their recorded graph on the ``graph`` route, its calls named
    as their numerics; the imported tandv frame has none."""
    app = TensorBoardApp(logdir, "python")
    try:
        for run in ("torch/lr_3e-3", "torch/lr_2e-1", "jax/lr_3e-3"):
            body = app.json("graph", run=run)
            assert len(body["nodes"]) > 10 and len(body["edges"]) > 10, run
            rows = frame[frame[("metadata", "run")] == run]
            activations = rows[rows[("metadata", "tensor_type")] == "Activation"]
            names = set(activations[("metadata", "name")])
            assert {node["layer"] for node in body["nodes"]} <= names, run
        imported = app.json("graph", run="tandv_import")
        assert imported["nodes"] == [] and imported["edges"] == []
    finally:
        app.close()


@pytest.mark.slow
def test_short_demo_writes_every_run(tmp_path):
    logdir = tmp_path / "runs"
    make_demo.main(["--logdir", str(logdir), "--steps", "4", "--every", "2"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", tandv_tb.DataWarning)
        frame = tandv_tb.read_frame(logdir)
    tandv_tb.validate(frame)
    runs = set(frame[("metadata", "run")])
    assert runs == {"torch/lr_3e-3", "torch/lr_2e-1", "jax/lr_3e-3", "tandv_import"}
    for run in runs:
        rows = frame[frame[("metadata", "run")] == run]
        assert set(rows[("metadata", "tensor_type")]) >= TYPES, run
        assert set(rows[("metadata", "step")]) == {0, 2}, run
    for run in ("torch/lr_3e-3", "jax/lr_3e-3"):
        scalars = event_accumulator.EventAccumulator(str(logdir / run))
        scalars.Reload()
        assert [e.step for e in scalars.Scalars("loss")] == [0, 1, 2, 3]
    assert_graphs(logdir, frame)
    # a second run reuses what is there
    again = subprocess.run(
        [sys.executable, make_demo.__file__, "--logdir", str(logdir), "--steps", "4"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert again.stdout.count("reused") == 3
