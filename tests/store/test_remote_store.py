"""The store over logdirs that are not a local path (``tandv_tb.filesystems.locations``): a local
S3 server (moto's, ``tests/helpers/s3_server.py``), ``file://`` URLs and ``--logdir_spec``;
what it reads equals what it reads from the same files on disk, new objects and new bytes
are read incrementally, and storage that fails says so in one sentence."""

from __future__ import annotations

import numpy as np
import pytest
from tensorboard.backend.event_processing import plugin_event_multiplexer

from tandv_tb.filesystems import locations
from tandv_tb.filesystems.locations import StorageError, public_url
from tandv_tb.store import NumericsStore
from tandv_tb.store.logdir import Logdir
from tandv_tb.store.series import Needs
from tandv_tb.writer import NumericsWriter
from tests.helpers.s3_server import S3Server, environment, unreachable_endpoint
from tests.helpers.s3_server import s3 as s3  # noqa: F401 (the fixture)
from tests.helpers.store_runs import stored_steps, write_run

TAGS = ("tandv/Activation/layers.0", "tandv/Activation/layers.1")


def _everything(db: NumericsStore, run: str) -> dict:
    """What routes read of a run: every record's columns, a record's histogram, estimated
    bins (vectors read back from the event files) and the exact casts."""
    db.refresh(run)
    ids = [db.tags(run)[tag][0] for tag in TAGS]
    rows = db.rows(run, ids, ("mean", "rm2", "numel"), vectors=True)
    estimated = db.series(run, ["layers.1", *TAGS], Needs(("rm2",), "float8_e5m2", bins=True))
    exact = db.series(run, list(TAGS), Needs(("numel",), "float8_e4m3fn"))
    step, record = db.record(run, TAGS[1], 3)
    return {
        "steps": rows.steps.tolist(),
        "columns": {k: v.tolist() for k, v in rows.columns.items()},
        "vectors": bytes(rows.vectors[0]),
        "bins": [s.bins.counts.tolist() if s.bins else None for s in estimated],
        "casts": [{k: v.tolist() for k, v in s.columns.items()} for s in exact],
        "record": (step, record.counts.tolist(), record.statistics),
    }


@pytest.mark.parametrize("reader_process", [False, True])
def test_a_run_uploaded_to_s3_is_read_as_from_disk(s3, tmp_path, reader_process):
    """Read in the store's threads, and in its reader process (as under TensorBoard)."""
    write_run(tmp_path / "local" / "deep" / "r", range(12))
    url = s3.bucket(f"uploaded{int(reader_process)}") + "/runs"
    s3.upload(tmp_path / "local", url)
    remote = NumericsStore(url, tmp_path / "c1", refresh_secs=0, reader_process=reader_process)
    local = NumericsStore(str(tmp_path / "local"), tmp_path / "c2", refresh_secs=0)
    try:
        assert remote.runs() == local.runs() == ["deep/r"]
        assert _everything(remote, "deep/r") == _everything(local, "deep/r")
        assert str(remote.path).startswith(str(tmp_path / "c1"))  # the store stays local
    finally:
        remote.close()
        local.close()


def test_new_objects_and_new_bytes_are_read_incrementally(s3, tmp_path, monkeypatch):
    url = s3.bucket("growing") + "/runs"
    reads: list[tuple[str, int, int]] = []  # (object, offset, size) of each range read
    real_read = locations.RemoteBytes.read

    def read(source, offset, size):
        reads.append((source.name.rsplit("/", 1)[1], offset, size))
        return real_read(source, offset, size)

    monkeypatch.setattr(locations.RemoteBytes, "read", read)
    db = NumericsStore(url, tmp_path / "c", refresh_secs=0)
    writer = NumericsWriter(f"{url}/w")
    try:
        write_run(tmp_path / "copy" / "r", range(5))  # a run synced as it grows
        s3.upload(tmp_path / "copy", url)
        assert stored_steps(db, "r") == list(range(5))
        (first,) = (tmp_path / "copy" / "r").iterdir()
        old_size = first.stat().st_size
        write_run(tmp_path / "more" / "r", range(5, 9))
        (more,) = (tmp_path / "more" / "r").iterdir()
        with open(first, "ab") as grown:  # the same file, longer: its new records
            grown.write(more.read_bytes()[len(_version_record(more)) :])
        reads.clear()
        s3.upload(tmp_path / "copy", url)
        assert stored_steps(db, "r") == list(range(9))
        chunks = [offset for name, offset, size in reads if size > 64]  # not the head
        assert chunks and min(chunks) == old_size  # only the new bytes

        rng = np.random.default_rng(0)
        for step in range(3):
            writer.add_numerics("layers.0", rng.normal(size=64).astype(np.float32), step)
        writer.flush()  # one object
        assert stored_steps(db, "w") == [0, 1, 2]
        for step in range(3, 6):
            writer.add_numerics("layers.0", rng.normal(size=64).astype(np.float32), step)
        reads.clear()
        writer.flush()  # a second object: only it is read
        assert stored_steps(db, "w") == list(range(6))
        listed = s3.client().list_objects_v2(Bucket="growing", Prefix="runs/w/")["Contents"]
        names = sorted(entry["Key"].rsplit("/", 1)[1] for entry in listed)
        assert len(names) == 2 and {name for name, _, _ in reads} == {names[1]}
    finally:
        writer.close()
        db.close()


def _version_record(path) -> bytes:
    """The first record of an event file (its file version)."""
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    return data[: 16 + length]


def test_a_file_url_is_the_local_folder(tmp_path):
    write_run(tmp_path / "logs" / "r", range(4))
    by_url = NumericsStore(f"file://{tmp_path / 'logs'}", tmp_path / "c", refresh_secs=0)
    try:
        assert by_url.runs() == ["r"] and stored_steps(by_url, "r") == [0, 1, 2, 3]
    finally:
        by_url.close()
    by_path = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    try:
        assert by_path.path == by_url.path  # one logdir, one store
    finally:
        by_path.close()


def test_a_logdir_spec_names_runs_as_tensorboard_does(tmp_path):
    write_run(tmp_path / "a" / "r1", range(2))
    write_run(tmp_path / "a" / "deep" / "r2", range(2))
    write_run(tmp_path / "b", range(3))  # a logdir that is itself a run
    write_run(tmp_path / "c" / "r3", range(2))  # a logdir without a group name
    spec = f"x:{tmp_path / 'a'},y:{tmp_path / 'b'},{tmp_path / 'c'}"
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    for path, name in [(tmp_path / "a", "x"), (tmp_path / "b", "y"), (tmp_path / "c", None)]:
        multiplexer.AddRunsFromDirectory(str(path), name)
    logdir = Logdir.from_spec(spec)
    assert logdir.runs() == sorted(multiplexer.Runs()) == ["r3", "x/deep/r2", "x/r1", "y/."]
    db = NumericsStore(logdir, tmp_path / "cache", refresh_secs=0)
    try:
        assert stored_steps(db, "y/.") == [0, 1, 2]
        assert stored_steps(db, "x/deep/r2") == [0, 1]
        assert not db.has_run("x/.") and not db.has_run("y/../a/r1")
    finally:
        db.close()


def test_the_reader_process_tells_an_unreachable_server_as_the_store_does(s3, tmp_path):
    """A run's first tags are listed by the reader process (as under TensorBoard): its
    failure comes back as the same ``StorageError``, message and kind."""
    dead = {"AWS_ENDPOINT_URL": unreachable_endpoint(), "S3_ENDPOINT": ""}
    with environment(dead):  # the reader process is started with it
        db = NumericsStore(s3.bucket("far") + "/runs", tmp_path / "c", reader_process=True)
        try:
            with pytest.raises(StorageError, match="cannot read s3://far/runs: the st") as found:
                db.first_tags("r")
            assert found.value.kind == "unreachable"
            assert db._reader_process._process is not None  # told by the process
        finally:
            db.close()


def test_a_missing_bucket_and_an_unreachable_server_are_named(s3, tmp_path):
    missing = NumericsStore("s3://no-such-bucket/runs", tmp_path / "c", refresh_secs=0)
    with pytest.raises(StorageError, match=r"cannot read s3://no-such-bucket/runs: not found"):
        missing.runs()
    missing.close()
    dead = {"AWS_ENDPOINT_URL": unreachable_endpoint(), "S3_ENDPOINT": ""}
    with environment(dead):
        unreachable = NumericsStore(s3.bucket("away") + "/runs", tmp_path / "c", refresh_secs=0)
        with pytest.raises(StorageError, match="cannot read s3://away/runs: the storage cannot"):
            unreachable.runs()
        with pytest.raises(StorageError) as found:
            unreachable.refresh("r")
        assert found.value.kind == "unreachable"
        unreachable.close()


def test_denied_access_is_named_and_no_secret_is_shown(tmp_path):
    server = S3Server(tmp_path, auth=True)
    try:
        server.bucket("closed")
        server.bucket("open")
        keys = server.grant("reader", "open")
        with environment(server.env(keys)):
            write_run(tmp_path / "local" / "r", range(3))
            allowed = NumericsStore("s3://open/runs", tmp_path / "c", refresh_secs=0)
            assert allowed.runs() == []
            allowed.close()
            denied = NumericsStore("s3://closed/runs", tmp_path / "c", refresh_secs=0)
            with pytest.raises(StorageError) as found:
                denied.runs()
            denied.close()
        assert found.value.kind == "denied"
        assert str(found.value).startswith("cannot read s3://closed/runs: access denied")
        assert keys["AWS_SECRET_ACCESS_KEY"] not in str(found.value)
    finally:
        server.close()


def test_a_url_is_shown_without_its_secrets():
    assert public_url("s3://bucket/runs") == "s3://bucket/runs"
    assert public_url("https://user:pass@host/logs?sig=abc") == "https://host/logs"
    assert public_url("/local/path") == "/local/path"


def test_small_pieces_read_ahead_as_from_disk_and_a_grown_object_again(s3, tmp_path, monkeypatch):
    """Pieces of 3,000 bytes, each fetching the next meanwhile: the same records as from
    disk; an object that grew after a short read-ahead is read again, not from it."""
    monkeypatch.setattr(locations, "READ_AHEAD_MIN", 1000)
    monkeypatch.setattr("tandv_tb.store.logdir.CHUNK_BYTES", 3000)  # the store's pieces
    used = []
    real = locations.RemoteBytes._from_ahead

    def from_ahead(source, offset, size):
        found = real(source, offset, size)
        used.append(found is not None)
        return found

    monkeypatch.setattr(locations.RemoteBytes, "_from_ahead", from_ahead)
    write_run(tmp_path / "local" / "r", range(200))
    url = s3.bucket("pieces") + "/runs"
    s3.upload(tmp_path / "local", url)
    remote = NumericsStore(url, tmp_path / "c1", refresh_secs=0)
    local = NumericsStore(str(tmp_path / "local"), tmp_path / "c2", refresh_secs=0)
    try:
        assert _everything(remote, "r") == _everything(local, "r")
        assert sum(used) > len(used) // 2  # most pieces came from the read-ahead
        write_run(tmp_path / "more" / "r", range(200, 210))
        (first,) = (tmp_path / "local" / "r").iterdir()
        (more,) = (tmp_path / "more" / "r").iterdir()
        with open(first, "ab") as grown:
            grown.write(more.read_bytes()[len(_version_record(more)) :])
        s3.upload(tmp_path / "local", url)
        assert stored_steps(remote, "r") == stored_steps(local, "r") == list(range(210))
    finally:
        remote.close()
        local.close()
