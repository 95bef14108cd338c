"""The command line and the findings while another process (a ``tensorboard``) holds the
numerics store: they work on a temporary copy of it, deleted afterwards."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tandv_tb.store import NumericsStore
from tests.helpers.store_runs import stored_steps, write_run

HOLD = """
import sys, time
from tandv_tb.store import NumericsStore
db = NumericsStore(sys.argv[1], sys.argv[2])
db.refresh("r")
print("holding", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def held(tmp_path):
    """A logdir of one run and its store, held open by another process."""
    write_run(tmp_path / "logs" / "r", range(12), nan_at=7)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "logs"), str(tmp_path / "xdg" / "tandv_tb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        yield tmp_path
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def test_a_held_store_is_copied_not_rebuilt(held, caplog):
    with caplog.at_level(logging.WARNING):
        db = NumericsStore(str(held / "logs"), held / "xdg" / "tandv_tb", refresh_secs=0)
    assert any("temporary copy" in r.message for r in caplog.records)
    assert not db.path.is_relative_to(held / "xdg")
    # the copy holds the holder's records before it reads anything itself
    stored = db._database.cursor().execute("SELECT count(*), max(step) FROM records").fetchone()
    assert stored == (24, 11)
    assert stored_steps(db, "r") == list(range(12))
    copy = db.path.parent
    db.close()
    assert not copy.exists()


def test_the_command_line_gives_the_same_findings_beside_a_holder(held):
    command = [sys.executable, "-m", "tandv_tb", "findings", str(held / "logs"), "--json"]
    env = {**os.environ, "XDG_CACHE_HOME": str(held / "other"), "PYTHONPATH": str(Path.cwd())}
    alone = subprocess.run(command, capture_output=True, text=True, env=env)
    assert alone.returncode == 1, alone.stderr  # the NaN at step 7 is an error
    beside = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**env, "XDG_CACHE_HOME": str(held / "xdg")},
    )
    assert beside.returncode == 1
    assert "temporary copy" in beside.stderr
    assert beside.stdout == alone.stdout
    assert '"step": 7' in alone.stdout
