"""The store where its cache folder cannot be written, met at real faults: a small tmpfs
filled, remounted read-only, an immutable folder (``tests/helpers/store_faults.py``). It
carries on in a temporary copy, in the system's temporary folder or in memory where that
is full too, says so once (the log, ``notice``) and stores every step; where nothing can
be written, ``refresh`` says why (``StoreUnwritable``) instead of reading an empty run."""

from __future__ import annotations

import logging
import tempfile

import pytest

from tandv_tb.store import NumericsStore
from tandv_tb.store.database import StoreUnwritable, database_path
from tests.helpers.store_faults import fill, fill_memory, immutable, read_only, small_tmpfs
from tests.helpers.store_runs import stored_steps, write_run


@pytest.fixture
def temporary(tmp_path, monkeypatch):
    """The system's temporary folder, for this test (``tempfile``'s own setting)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _said_once(caplog, db: NumericsStore, *words: str) -> str:
    """The one warning of the log: the store's ``notice``, naming ``words``."""
    (warning,) = _warnings(caplog)
    assert warning == f"tandv_tb: {db.notice}"
    for word in (*words, "--tandv_cache_dir"):
        assert word in warning, warning
    return warning


def test_a_cache_folder_found_full_at_a_write_moves_the_store(tmp_path, temporary, caplog):
    write_run(tmp_path / "logs" / "r", range(6))
    with small_tmpfs(tmp_path / "cache") as cache:
        db = NumericsStore(str(tmp_path / "logs"), cache, refresh_secs=0)
        try:
            assert db.path.is_relative_to(cache) and db.notice is None
            fill(cache)
            with caplog.at_level(logging.WARNING):
                assert stored_steps(db, "r") == list(range(6))
                write_run(tmp_path / "logs" / "r", range(6, 9))  # more, into the copy
                assert stored_steps(db, "r") == list(range(9))
            store_folder = database_path(str(tmp_path / "logs"), cache).parent
            _said_once(caplog, db, str(store_folder), "No space left on device", str(temporary))
            assert db.path.is_relative_to(temporary)
        finally:
            db.close()
        assert not list(temporary.iterdir())  # the temporary store is deleted


def test_a_read_only_cache_folder_gives_a_copy_of_its_store(tmp_path, temporary, caplog):
    write_run(tmp_path / "logs" / "r", range(4))
    with small_tmpfs(tmp_path / "cache") as cache:
        NumericsStore(str(tmp_path / "logs"), cache, refresh_secs=0).close()
        stored = NumericsStore(str(tmp_path / "logs"), cache, refresh_secs=0)
        assert stored_steps(stored, "r") == list(range(4))
        stored.close()
        write_run(tmp_path / "logs" / "r", range(4, 7))
        with read_only(cache), caplog.at_level(logging.WARNING):
            db = NumericsStore(str(tmp_path / "logs"), cache, refresh_secs=0)
            try:
                copied = db._database.cursor().execute("SELECT count(*) FROM records")
                assert copied.fetchone()[0] == 8  # what was stored, before reading the files
                assert stored_steps(db, "r") == list(range(7))
            finally:
                db.close()
        _said_once(caplog, db, str(cache), "Read-only file system", "a temporary copy")


def test_an_immutable_store_folder_is_found_at_the_first_write(tmp_path, temporary, caplog):
    write_run(tmp_path / "logs" / "r", range(5))
    cache = tmp_path / "cache"
    NumericsStore(str(tmp_path / "logs"), cache).close()  # its database, and nothing else
    with immutable(database_path(str(tmp_path / "logs"), cache).parent):
        db = NumericsStore(str(tmp_path / "logs"), cache, refresh_secs=0)
        try:
            assert db.path.is_relative_to(cache)  # opened: nothing written yet
            with caplog.at_level(logging.WARNING):
                assert stored_steps(db, "r") == list(range(5))
            _said_once(caplog, db, str(cache), "Operation not permitted")
            assert db.path.is_relative_to(temporary)
        finally:
            db.close()


def test_memory_holds_the_store_where_the_temporary_folder_is_full_too(tmp_path, caplog):
    write_run(tmp_path / "logs" / "r", range(6))
    with (
        small_tmpfs(tmp_path / "cache") as cache,
        small_tmpfs(tmp_path / "tmp") as temporary,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(tempfile, "tempdir", str(temporary))
        fill(temporary)
        db = NumericsStore(str(tmp_path / "logs"), cache, refresh_secs=0)
        try:
            fill(cache)
            with caplog.at_level(logging.WARNING):
                assert stored_steps(db, "r") == list(range(6))
            said = _said_once(caplog, db, str(cache), f"the temporary folder {temporary}")
            assert "it is kept in memory" in said and db.path is None
            caplog.clear()
            fill_memory(db)
            write_run(tmp_path / "logs" / "s", range(3))
            with caplog.at_level(logging.WARNING), pytest.raises(StoreUnwritable) as raised:
                db.refresh("s")
            for place in (str(cache), f"the temporary folder {temporary}", "memory"):
                assert place in str(raised.value)
            assert raised.value.kind == "cache" and "--tandv_cache_dir" in str(raised.value)
            assert _warnings(caplog) == [f"tandv_tb: {raised.value}"]
            with pytest.raises(StoreUnwritable):  # on every call: never an empty run
                db.refresh("s")
            db._database.cursor().execute("DROP TABLE ballast")
            assert stored_steps(db, "s", "tandv/Activation/layers.0") == [0, 1, 2]  # room again
        finally:
            db.close()
