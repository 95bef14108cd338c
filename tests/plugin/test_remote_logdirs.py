"""A real ``tensorboard`` on logdirs that are not a local folder: ``s3://`` on a local S3
server (moto's, ``tests/helpers/s3_server.py``), ``file://``, and ``--logdir_spec`` with
two named logdirs (one of them on S3).

On S3: a run tracked by ``tandv_tb.torch.track(logdir="s3://...")`` and a run uploaded
there; every route of ``http_api.md`` answers exactly what a ``tensorboard`` answers from
a local copy of the same objects, every step of them; a run growing while TensorBoard
runs is followed; a denied bucket and an unreachable endpoint give a JSON error naming the
logdir and the reason (never a 500).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

import tandv_tb.torch
from tandv_tb.writer import NumericsWriter
from tests.helpers.model_graphs import gpt_graph
from tests.helpers.plugin import TensorBoardProcess, write_logdir
from tests.helpers.routes import every_route, query
from tests.helpers.s3_server import S3Server, download, environment, unreachable_endpoint
from tests.helpers.s3_server import s3 as s3  # noqa: F401 (the fixture)
from tests.helpers.store_runs import write_run

pytestmark = pytest.mark.slow
STEPS = 12


def _train(logdir: str) -> None:
    """A small model trained for ``STEPS`` steps, tracked into ``logdir``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tandv_tb.torch.track(
        model, logdir=logdir, optimizer=optimizer, formats=("float8_e4m3fn",)
    ) as tracker:
        for _ in range(STEPS):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()


def _wait_loaded(server: TensorBoardProcess, runs: list[str], steps: dict[str, int]) -> None:
    def loaded():
        listed = {r["run"]: r for r in server.json(query("runs"))["runs"]}
        return set(runs) <= set(listed) and all(
            server.json(query("steps", run=run, tensor_type="Activation"))["steps"][-1] == last
            for run, last in steps.items()
        )

    server.wait(loaded, f"runs {runs} to be served")


def test_every_route_serves_every_step_from_s3(s3, tmp_path):
    url = s3.bucket("runs") + "/logs"
    _train(f"{url}/tracked")
    layout = write_logdir(tmp_path / "uploaded", steps=STEPS)
    with NumericsWriter(str(tmp_path / "uploaded" / "alpha")) as writer:
        writer.add_graph(gpt_graph(2))
    s3.upload(tmp_path / "uploaded", url)
    local = download(s3, url, tmp_path / "copy")
    remote_tb = TensorBoardProcess(
        url, "auto", f"--tandv_cache_dir={tmp_path / 'c1'}", log_folder=tmp_path
    )
    local_tb = TensorBoardProcess(local, "false", f"--tandv_cache_dir={tmp_path / 'c2'}")
    try:
        expected = {"tracked": STEPS - 1, "alpha": STEPS - 1, "nested/beta": STEPS - 1}
        for server in (remote_tb, local_tb):
            _wait_loaded(server, list(expected), expected)
        heatmap = remote_tb.json(
            query("heatmap", run="alpha", tensor_type="Gradient", metric="mean", columns=10000)
        )
        assert [c["step"] for c in heatmap["columns"]] == layout.steps("alpha", "Gradient", "embed")
        graph = remote_tb.json(query("graph", run="alpha"))
        assert (graph["nodes"], graph["edges"]) == tuple(gpt_graph(2).values())
        tracked = remote_tb.json(query("steps", run="tracked", tensor_type="Weight"))
        assert tracked["steps"] == list(range(STEPS))
        paths = every_route(remote_tb)
        assert len(paths) > 200
        for path in paths:
            status, remote, _ = remote_tb.get(path)
            assert status == 200, (path, remote[:300])
            assert remote == local_tb.get(path)[1], path
    finally:
        remote_tb.close()
        local_tb.close()


def test_a_run_growing_on_s3_is_followed(s3, tmp_path):
    url = s3.bucket("growing") + "/logs"
    writer = NumericsWriter(f"{url}/live")
    rng = np.random.default_rng(0)

    def write(steps: range) -> None:
        for step in steps:
            writer.add_numerics("layers.0", rng.normal(size=64).astype(np.float32), step)
        writer.flush()  # a new object

    write(range(5))
    server = TensorBoardProcess(
        url, "auto", f"--tandv_cache_dir={tmp_path / 'c'}", log_folder=tmp_path
    )
    try:
        _wait_loaded(server, ["live"], {"live": 4})
        write(range(5, 9))
        _wait_loaded(server, ["live"], {"live": 8})
        steps = server.json(query("steps", run="live", tensor_type="Activation"))["steps"]
        assert steps == list(range(9))
    finally:
        writer.close()
        server.close()


def _storage_error(server: TensorBoardProcess) -> tuple[int, dict]:
    status, body, headers = server.get(query("runs"), timeout=120)
    assert headers["Content-Type"].startswith("application/json")
    return status, json.loads(body)


def test_a_denied_bucket_is_a_clear_error(tmp_path):
    server = S3Server(tmp_path, auth=True)
    server.bucket("closed")
    server.bucket("open")
    keys = server.grant("reader", "open")
    try:
        with environment(server.env(keys)):
            tensorboard = TensorBoardProcess("s3://closed/logs", "auto", log_folder=tmp_path)
        try:
            status, body = tensorboard.wait(lambda: _storage_error(tensorboard), "an answer")
            assert status == 403 and body["storage"] == "denied"
            assert body["error"].startswith("cannot read s3://closed/logs: access denied")
            status, _, _ = tensorboard.get(query("layers", run="r", tensor_type="Activation"))
            assert status == 403
        finally:
            tensorboard.close()
    finally:
        server.close()


def test_an_unreachable_endpoint_is_a_clear_error(tmp_path):
    dead = unreachable_endpoint()
    variables = {"AWS_ENDPOINT_URL": dead, "S3_ENDPOINT": dead, "AWS_ACCESS_KEY_ID": "k"}
    with environment(
        {**variables, "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1"}
    ):
        tensorboard = TensorBoardProcess("s3://away/logs", "auto", log_folder=tmp_path)
    try:
        status, body = tensorboard.wait(lambda: _storage_error(tensorboard), "an answer")
        assert status == 503 and body["storage"] == "unreachable"
        assert body["error"].startswith("cannot read s3://away/logs: the storage cannot be reached")
        tensorboard.log.seek(0)
        assert f"tandv_tb: {body['error']}" in tensorboard.log.read()  # on its command line
    finally:
        tensorboard.close()


def test_a_file_url_and_a_logdir_spec_of_two_named_logdirs(s3, tmp_path):
    write_run(tmp_path / "local" / "a", range(6))
    url = s3.bucket("spec") + "/logs"
    write_run(tmp_path / "up" / "b", range(4))
    s3.upload(tmp_path / "up", url)
    by_url = TensorBoardProcess(f"file://{tmp_path / 'local'}", "auto", log_folder=tmp_path)
    spec = f"here:{tmp_path / 'local'},there:{url}"
    by_spec = TensorBoardProcess(None, "auto", f"--logdir_spec={spec}", log_folder=tmp_path)
    try:
        _wait_loaded(by_url, ["a"], {"a": 5})
        _wait_loaded(by_spec, ["here/a", "there/b"], {"here/a": 5, "there/b": 3})
        for server, run in ((by_url, "a"), (by_spec, "here/a"), (by_spec, "there/b")):
            heatmap = server.json(
                query("heatmap", run=run, tensor_type="Activation", metric="rm2", columns=100)
            )
            assert heatmap["total_steps"] == (6 if run.endswith("a") else 4)
        findings = by_spec.json(query("findings", run=["here/a", "there/b"]))
        assert findings["runs"] == ["here/a", "there/b"]
    finally:
        by_url.close()
        by_spec.close()
