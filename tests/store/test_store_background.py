"""The store's background build (``NumericsStore.build_in_background``, started by the plugin
at TensorBoard's start): every run is read without a request; an update paused between
transactions goes on from where it stopped, with the same rows as one read to the end; a
request for a run is served while another run is being built; closing stops the build."""

from __future__ import annotations

import time

import pytest
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin

from tandv_tb.plugin.plugin import NumericsPlugin
from tandv_tb.store import NumericsStore, ingest
from tandv_tb.store.logdir import Logdir
from tandv_tb.store.run_ids import RunIds
from tests.helpers.store_runs import stored_steps, write_run


def _wait(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _logdir(tmp_path):
    write_run(tmp_path / "logs" / "a", range(40), layers=3)
    write_run(tmp_path / "logs" / "deep" / "b", range(25))
    return tmp_path / "logs"


def test_the_plugin_builds_every_run_at_start_without_a_request(tmp_path):
    logdir = _logdir(tmp_path)
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    context = base_plugin.TBContext(
        data_provider=data_provider.MultiplexerDataProvider(multiplexer, str(logdir)),
        logdir=str(logdir),
        flags=None,
    )
    plugin = NumericsPlugin(context)  # what TensorBoard does at its start
    db = plugin._store
    assert db._reader_process is not None  # TensorBoard's Python loader runs in this process
    try:
        _wait(lambda: db.has_read("a") and db.has_read("deep/b"), "both runs to be read")
        assert stored_steps(db, "a", "tandv/Activation/layers.2") == list(range(40))
        assert stored_steps(db, "deep/b") == list(range(25))
    finally:
        plugin._store.close()
    assert not db._updates._builder.is_alive()


def test_a_paused_update_goes_on_where_it_stopped(tmp_path, monkeypatch):
    run_dir = tmp_path / "logs" / "r"
    write_run(run_dir, range(0, 30))
    write_run(run_dir, range(30, 50))  # a second event file: two transactions at least
    monkeypatch.setattr(ingest, "BATCH_RECORDS", 1)  # a transaction per chunk
    paused = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    cursor = paused._database.cursor()
    run_id = RunIds(paused._database).add(cursor, "r")
    table = ingest.stored_tags(cursor, run_id)
    files = Logdir.of(str(tmp_path / "logs")).files("r")
    assert [files.path(name) for name in files.sizes()] == [
        str(p) for p in sorted(run_dir.iterdir())
    ]
    asked = []
    changed, finished = ingest.update_run(
        cursor, files, run_id, table, pause=lambda: asked.append(1) or len(asked) > 1
    )
    assert (changed, finished) == (True, False)
    partial = cursor.execute("SELECT count(*) FROM records").fetchone()[0]
    assert 0 < partial < 2 * 50
    assert ingest.update_run(cursor, files, run_id, table) == (True, True)
    assert ingest.update_run(cursor, files, run_id, table) == (False, True)
    assert stored_steps(paused, "r") == list(range(50))
    whole = NumericsStore(str(tmp_path / "logs"), tmp_path / "c2", refresh_secs=0)
    whole.refresh("r")
    for tag in ("tandv/Activation/layers.0", "tandv/Activation/layers.1"):
        got = paused.rows("r", [paused.tags("r")[tag][0]], ("mean", "max_abs", "zero_count"))
        expected = whole.rows("r", [whole.tags("r")[tag][0]], ("mean", "max_abs", "zero_count"))
        assert got.steps.tolist() == expected.steps.tolist() == list(range(50))
        for column, values in expected.columns.items():
            assert got.columns[column].tobytes() == values.tobytes()
    whole.close()
    paused.close()


def test_a_request_is_served_while_another_run_is_built(tmp_path, monkeypatch):
    logdir = _logdir(tmp_path)
    monkeypatch.setattr(ingest, "BATCH_RECORDS", 1)
    db = NumericsStore(str(logdir), tmp_path / "c", refresh_secs=0)
    real_update = ingest.update_run
    started = []

    def slow_update(cursor, files, run_id, table, pause=None, reading=None):
        """The background build of run "a" first waits for the request below."""
        if pause is not None and files.run == "a" and not started:
            started.append(files.run)
            _wait(pause, "the request to ask for the lock")
        return real_update(cursor, files, run_id, table, pause, reading)

    monkeypatch.setattr("tandv_tb.store.updates.update_run", slow_update)
    try:
        db.build_in_background()
        _wait(lambda: started, "the background build to start on run a")
        assert not db.has_read("a")  # being built: listed as TensorBoard lists it
        assert stored_steps(db, "deep/b") == list(range(25))  # served before a is done
        _wait(lambda: db.has_read("a"), "run a to be read")
        assert stored_steps(db, "a") == list(range(40))
    finally:
        db.close()


@pytest.mark.parametrize("runs", [1, 2])
def test_closing_stops_a_build_and_a_later_one_goes_on(tmp_path, monkeypatch, runs):
    logdir = _logdir(tmp_path) if runs == 2 else tmp_path / "logs"
    if runs == 1:
        write_run(logdir / "a", range(40), layers=3)
    monkeypatch.setattr(ingest, "BATCH_RECORDS", 1)
    db = NumericsStore(str(logdir), tmp_path / "c", refresh_secs=0)
    db.build_in_background()
    db.close()  # at once: the build stops at its next transaction
    assert not db._updates._builder.is_alive()
    again = NumericsStore(str(logdir), tmp_path / "c", refresh_secs=0)
    again.build_in_background()
    try:
        _wait(lambda: again.has_read("a"), "run a to be read")
        assert stored_steps(again, "a", "tandv/Activation/layers.2") == list(range(40))
    finally:
        again.close()
