"""Where event files lie (``tandv_tb.filesystems.locations``): one local-or-remote rule, and a
local folder listed and read as a remote one would be."""

from __future__ import annotations

import numpy as np
import pytest

from tandv_tb.filesystems.locations import LocalFolder, RemoteFolder, is_local, location, public_url


@pytest.mark.parametrize(
    ("logdir", "local"),
    [
        ("runs/exp", True),
        ("/tmp/runs", True),
        ("file:///tmp/runs", True),
        ("s3://bucket/runs", False),
        ("memory://runs", False),
    ],
)
def test_one_rule_tells_local_folders_from_object_storage(logdir, local):
    assert is_local(logdir) is local
    where = location(logdir)
    assert where.local is local
    assert isinstance(where, LocalFolder if local else RemoteFolder)


def test_a_file_url_is_the_folder_it_names(tmp_path):
    where = location(f"file://{tmp_path}/a%20b")
    assert where.root == f"{tmp_path}/a b"


def test_a_local_folder_lists_its_runs_and_reads_byte_ranges(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "events.out.tfevents.1.host").write_bytes(bytes(range(100)))
    (tmp_path / "events.out.tfevents.2.host").write_bytes(b"xy")
    (tmp_path / "a" / "notes.txt").write_text("not an event file")
    where = location(str(tmp_path))
    assert where.runs() == {
        ".": {"events.out.tfevents.2.host": 2},
        "a/b": {"events.out.tfevents.1.host": 100},
    }
    assert where.files("a/b") == {"events.out.tfevents.1.host": 100}
    assert where.files("missing") == {}
    assert where.source("a/b", "events.out.tfevents.1.host").read(10, 3) == bytes([10, 11, 12])
    out = np.zeros(6, np.uint8)
    at, sizes = np.array([90, 5]), np.array([2, 3])
    where.read_ranges("a/b", "events.out.tfevents.1.host", at, sizes, out, np.array([0, 3]))
    assert out.tolist() == [90, 91, 0, 5, 6, 7]


def test_a_url_is_shown_without_its_secrets():
    assert public_url("s3://user:secret@bucket/runs?sig=abc") == "s3://bucket/runs"
    assert public_url("runs/exp") == "runs/exp"
