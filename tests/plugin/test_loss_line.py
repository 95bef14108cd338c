"""The tab's loss line (the ``scalars`` route) through a real ``tensorboard``: every step
from the plugin's store, so a loss spike the Findings card names is on the line.
TensorBoard's own memory keeps 1,000 sampled steps of a scalar tag; without a local
logdir (``--logdir_spec``) the route serves what TensorBoard holds."""

from __future__ import annotations

import math

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from tandv_tb.writer import NumericsWriter, RecordItem
from tests.helpers.plugin import TensorBoardProcess, TensorBoardSpecProcess, make_record
from tests.helpers.store_runs import ROUTES

STEPS, SPIKE = 3000, 1537


def _loss(step: int) -> float:
    """A slowly falling loss with a little wobble, and a spike at ``SPIKE``."""
    value = 2.0 * 0.9995**step + 0.01 * math.sin(step)
    return 5.0 * value if step == SPIKE else value


def _write(run_dir, steps: int) -> None:
    summary = SummaryWriter(str(run_dir))
    writer = NumericsWriter(writer=summary)
    rng = np.random.default_rng(0)
    for step in range(steps):
        summary.add_scalar("loss", _loss(step), step)
        if step % 100 == 0:
            writer.add_records(step, [RecordItem("x", make_record(rng, "float32"))])
    writer.close()
    summary.close()


def test_the_loss_line_holds_every_step_and_the_spike_the_findings_name(tmp_path):
    _write(tmp_path / "logs" / "long", STEPS)
    server = TensorBoardProcess(tmp_path / "logs", "true", f"--tandv_cache_dir={tmp_path / 'c'}")
    try:
        server.wait(lambda: server.json(ROUTES + "runs")["runs"], "the run to be listed")
        (loss,) = server.json(ROUTES + "scalars?run=long")["scalars"]
        assert loss["tag"] == "loss"
        assert loss["steps"] == list(range(STEPS))  # TensorBoard itself holds 1,000
        assert loss["values"] == [float(np.float32(_loss(step))) for step in range(STEPS)]
        assert len(loss["wall_times"]) == STEPS
        findings = server.json(ROUTES + "findings?run=long")["findings"]
        (spike,) = [f for f in findings if f["kind"] == "loss_spike"]
        assert spike["step"] == SPIKE and spike["step"] in loss["steps"]
        assert spike["value"] == loss["values"][loss["steps"].index(SPIKE)]
        csv = server.get(ROUTES + "scalars.csv?run=long")[1].decode().splitlines()
        assert len(csv) == 1 + STEPS and csv[1 + SPIKE].startswith(f"long,loss,{SPIKE},")
    finally:
        server.close()


def test_without_a_local_logdir_the_line_is_what_tensorboard_holds(tmp_path):
    _write(tmp_path / "logs" / "short", 50)
    server = TensorBoardSpecProcess(f"x:{tmp_path / 'logs'}", tmp_path)
    try:
        body = server.wait(
            lambda: server.json(ROUTES + "scalars?run=x/short")["scalars"], "the scalars"
        )
        (loss,) = body
        assert loss["steps"] == list(range(50))
        assert loss["values"] == [float(np.float32(_loss(step))) for step in range(50)]
        status, _, _ = server.get(ROUTES + "scalars?run=x/short&tag=nope")
        assert status == 404
    finally:
        server.close()
