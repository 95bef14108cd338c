"""A real ``tensorboard`` where storage fails at real faults: its cache folder full (a
small tmpfs), read-only or immutable; a logdir URL whose fsspec filesystem cannot be made
(its package missing, its constructor refusing); a store that can be written nowhere.
Every route is served, the same as without the fault, or answered with a clear 503 (never
a 404 that says a run has no numerics); the log and the ``runs`` route say what happened
once."""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path

import pytest
from werkzeug.test import Client

from tests.helpers.fault_filesystems import site_environment, unopenable
from tests.helpers.plugin import PluginRoutes, TensorBoardProcess, unread_provider
from tests.helpers.routes import every_route, query
from tests.helpers.s3_server import environment
from tests.helpers.store_faults import (
    REASONS,
    broken_cache,
    fill,
    fill_memory,
    small_tmpfs,
    wait_every_run,
)
from tests.helpers.store_runs import write_run


def log_of(server: TensorBoardProcess) -> str:
    server.log.flush()
    return Path(server.log.name).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(REASONS))
def test_a_cache_folder_that_cannot_be_written_serves_every_route(tmp_path, fault):
    (tmp_path / "tmp").mkdir()
    with broken_cache(tmp_path, fault) as cache:
        with environment({"TMPDIR": str(tmp_path / "tmp")}):
            server = TensorBoardProcess(tmp_path / "logs", "auto", f"--tandv_cache_dir={cache}")
        reference = TensorBoardProcess(
            tmp_path / "logs", "auto", f"--tandv_cache_dir={tmp_path / 'writable'}"
        )
        try:
            for tensorboard in (server, reference):
                wait_every_run(tensorboard)
            paths = every_route(server)
            assert len(paths) > 200
            for path in paths:
                status, body, _ = server.get(path)
                assert status == 200, (path, body[:300])
                if path != query("runs"):  # which says where the store is
                    assert body == reference.get(path)[1], path
            said = [line for line in log_of(server).splitlines() if "--tandv_cache_dir" in line]
            assert len(said) == 1, said
            for words in (str(cache), REASONS[fault], str(tmp_path / "tmp")):
                assert words in said[0], said[0]
            (notice,) = server.json(query("runs"))["notices"]
            assert said[0].endswith(f"tandv_tb: {notice}")
            assert reference.json(query("runs"))["notices"] == []
        finally:
            server.close()
            reference.close()


#: Every route that reads the logdir, each as the tab asks it.
LOGDIR_ROUTES = [
    query("runs"),
    *(
        query(route, run="alpha", tensor_type="Activation", layer="embed", metric="rm2")
        for route in ("layers", "steps", "histogram", "heatmap", "series", "blocks")
    ),
    query("scalars", run="alpha"),
    query("findings", run="alpha"),
    query("layers.csv", run="alpha", tensor_type="Activation"),
]


@pytest.mark.parametrize(("url", "named"), unopenable())
def test_a_logdir_whose_filesystem_cannot_be_made_loads_the_tab(tmp_path, url, named):
    with environment(site_environment()):
        server = TensorBoardProcess(url, "false", log_folder=tmp_path)
    try:
        server.wait(lambda: server.json("/data/plugins_listing")["tandv"]["enabled"], "the tab")
        expected = f"cannot read {url}: "
        for path in LOGDIR_ROUTES:
            status, body, headers = server.get(path)
            assert headers["Content-Type"].startswith("application/json"), path
            answer = json.loads(body)
            assert (status, answer["storage"]) == (503, "failed"), (path, answer)
            assert answer["error"].startswith(expected) and named in answer["error"], answer
        for path in (query("formats"), query("metrics")):  # they read no logdir
            assert server.get(path)[0] == 200
        log = log_of(server)
        assert "Failed to load plugin" not in log
        assert len([line for line in log.splitlines() if f"tandv_tb: {expected}" in line]) == 1
    finally:
        server.close()


def test_a_store_written_nowhere_answers_503_not_404(tmp_path, monkeypatch, caplog):
    write_run(tmp_path / "logs" / "r", range(5))
    with small_tmpfs(tmp_path / "cache") as cache, small_tmpfs(tmp_path / "tmp") as temporary:
        fill(cache)
        fill(temporary)
        monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # the system's, for the test
        with caplog.at_level(logging.WARNING):
            routes = PluginRoutes(unread_provider(tmp_path), tmp_path / "logs", cache)
        try:
            assert routes.json("layers", run="r", tensor_type="Activation")["layers"]
            (notice,) = routes.json("runs")["notices"]
            assert "it is kept in memory" in notice
            said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert said == [f"tandv_tb: {notice}"]
            fill_memory(routes.plugin._store)
            write_run(tmp_path / "logs" / "s", range(3))
            client = Client(routes.plugin.get_plugin_apps()["/layers"])
            asked = {"run": "s", "tensor_type": "Activation"}
            for _ in range(2):  # the second within the store's refresh interval, mostly
                answer = client.get("/layers", query_string=asked)
                assert answer.status_code == 503, answer.get_data(as_text=True)
                body = answer.get_json()
                assert body["storage"] == "cache" and "--tandv_cache_dir" in body["error"]
                for place in (str(cache), f"the temporary folder {temporary}", "memory"):
                    assert place in body["error"]
            routes.plugin._store._database.cursor().execute("DROP TABLE ballast")
            deadline = time.monotonic() + 60  # a ceiling: it ends once s is stored
            while client.get("/layers", query_string=asked).status_code != 200:
                assert time.monotonic() < deadline, "s was not stored once memory was free"
                time.sleep(0.2)
        finally:
            routes.close()
