"""The store's reader process (``tandv_tb.store.reader_process``): what it reads is stored
exactly as what the store reads in its own threads (every row of every table); an update
paused while a piece is read ahead goes on where it stopped and leaves no file behind; a
reader process that is killed is replaced by reading in the store's process; the process
ends with the store, and with the server however the server ends."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from tandv_tb.store import NumericsStore, ingest
from tandv_tb.store.reader_process import ReaderProcess
from tandv_tb.store.run_ids import RunIds
from tandv_tb.store.schema import FILE_ROWS
from tandv_tb.writer import NumericsWriter
from tests.helpers.model_graphs import gpt_graph
from tests.helpers.store_runs import stored_steps, write_run

#: What orders every row of each table (its key).
ORDER = {
    "records": "file_id, seq",
    "casts": "file_id, seq, format_index",
    "blocks": "file_id, seq, format_index",
    "block_scales": "ALL",
    "nonfinite": "file_id, step, position",
    "scalars": "file_id, seq",
    "graphs": "file_id, piece_end, position",
}


def _tables(db: NumericsStore) -> dict[str, list]:
    """Every row of every table the store fills from files, and its tags and files."""
    cursor = db._database.cursor()
    found = {
        name: cursor.execute(f"SELECT * FROM {name} ORDER BY {ORDER[name]}").fetchall()
        for name in FILE_ROWS
    }
    found["tags"] = cursor.execute("SELECT * FROM tags ORDER BY run_id, tag_id").fetchall()
    files = "SELECT run_id, name, consumed, n_values, head FROM files ORDER BY run_id, name"
    found["files"] = cursor.execute(files).fetchall()
    return found


def _logdir(tmp_path):
    write_run(tmp_path / "logs" / "a", range(0, 40), layers=3, nan_at=7)
    write_run(tmp_path / "logs" / "a", range(40, 60), layers=3)  # a second file
    write_run(tmp_path / "logs" / "deep" / "b", range(25))
    with NumericsWriter(str(tmp_path / "logs" / "deep" / "b")) as writer:
        writer.add_graph(gpt_graph(2), step=3)
    return tmp_path / "logs"


def _children(pid: int) -> list[int]:
    path = f"/proc/{pid}/task/{pid}/children"
    with open(path) as found:
        return [int(child) for child in found.read().split()]


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of 3,000 bytes and a transaction per piece: many of each."""
    monkeypatch.setattr("tandv_tb.store.logdir.CHUNK_BYTES", 3000)
    monkeypatch.setattr(ingest, "BATCH_RECORDS", 1)


def test_what_the_process_reads_is_stored_as_what_is_read_here(tmp_path, small_pieces):
    logdir = _logdir(tmp_path)
    here = NumericsStore(str(logdir), tmp_path / "c1", refresh_secs=0)
    there = NumericsStore(str(logdir), tmp_path / "c2", refresh_secs=0, reader_process=True)
    try:
        for db in (here, there):
            assert stored_steps(db, "a", "tandv/Activation/layers.2") == list(range(60))
            assert stored_steps(db, "deep/b") == list(range(25))
        expected, found = _tables(here), _tables(there)
        assert len(expected["records"]) == 60 * 3 + 25 * 2
        assert expected["casts"] and len(expected["graphs"]) == 1
        assert repr(found) == repr(expected)  # NaN statistics compared too
        assert there.tags("a") == here.tags("a")
        assert _children(os.getpid())  # read by a process of its own
    finally:
        here.close()
        there.close()


def test_a_paused_update_goes_on_and_leaves_no_file_of_a_piece_read_ahead(tmp_path, small_pieces):
    logdir = _logdir(tmp_path)
    reader = ReaderProcess()
    db = NumericsStore(str(logdir), tmp_path / "c", refresh_secs=0)
    cursor = db._database.cursor()
    run_id = RunIds(db._database).add(cursor, "a")
    table = ingest.stored_tags(cursor, run_id)
    files = db._logdir.files("a")
    try:
        asked = []
        changed, finished = ingest.update_run(
            cursor, files, run_id, table, lambda: asked.append(1) or len(asked) > 1, reader
        )
        assert changed and not finished  # stopped after its first transaction
        folder = reader._folder
        assert ingest.update_run(cursor, files, run_id, table, None, reader) == (True, True)
        assert stored_steps(db, "a", "tandv/Activation/layers.2") == list(range(60))
        deadline = time.monotonic() + 30
        while os.listdir(folder) and time.monotonic() < deadline:
            time.sleep(0.05)  # the piece read ahead when it paused is removed as it comes
        assert os.listdir(folder) == []
    finally:
        reader.close()
        db.close()
    assert not os.path.exists(folder)


def test_a_killed_reader_process_is_replaced_by_reading_here(tmp_path, small_pieces, caplog):
    logdir = _logdir(tmp_path)
    db = NumericsStore(str(logdir), tmp_path / "c", refresh_secs=0, reader_process=True)
    try:
        assert stored_steps(db, "deep/b") == list(range(25))
        process = db._reader_process._process
        process.kill()
        process.wait()
        with caplog.at_level(logging.WARNING):
            assert stored_steps(db, "a", "tandv/Activation/layers.2") == list(range(60))
        assert "reader process ended unexpectedly (exit status -9" in caplog.text
    finally:
        db.close()


_SERVER = """
import sys, time
from tandv_tb.store import NumericsStore
db = NumericsStore(sys.argv[1], sys.argv[2], reader_process=True)
db.refresh("a")
print(db._reader_process._process.pid, db._reader_process._folder, flush=True)
time.sleep(600)
"""


def test_the_process_ends_with_the_store_and_with_a_killed_server(tmp_path):
    logdir = _logdir(tmp_path)
    db = NumericsStore(str(logdir), tmp_path / "c1", refresh_secs=0, reader_process=True)
    assert stored_steps(db, "deep/b") == list(range(25))
    process, folder = db._reader_process._process, db._reader_process._folder
    db.close()
    assert process.poll() is not None
    assert not os.path.exists(folder)

    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(logdir), str(tmp_path / "c2")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid, folder = server.stdout.readline().split()
        server.send_signal(signal.SIGKILL)  # no cleanup of its own
        server.wait()
        deadline = time.monotonic() + 30
        while (_alive(int(pid)) or os.path.exists(folder)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(int(pid))
        assert not os.path.exists(folder)
    finally:
        server.kill()
        server.wait()


def _alive(pid: int) -> bool:
    """Whether the process runs (an exited child of a killed parent is reaped by init)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
