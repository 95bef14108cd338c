"""Real faults of the places the store is kept in: a small tmpfs mounted on a folder,
filled, remounted read-only, or a folder made immutable (``chattr +i``); the store's
memory filled. The tests run as root, where a folder's mode bits stop no write; each
helper skips the test where the system does not let it make the fault."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tandv_tb.store import NumericsStore
from tests.helpers.plugin import TensorBoardProcess, write_logdir
from tests.helpers.routes import query

#: What the system says of each fault of the cache folder.
REASONS = {
    "full": "No space left on device",
    "read-only": "Read-only file system",
    "immutable": "Operation not permitted",
}


def _run(*command: str) -> subprocess.CompletedProcess | None:
    """``command``'s result; None where it is not installed."""
    try:
        return subprocess.run(command, capture_output=True, text=True)
    except FileNotFoundError:
        return None


def _skip_unless(done: subprocess.CompletedProcess | None, what: str) -> None:
    if done is None or done.returncode != 0:
        why = "not installed" if done is None else done.stderr.strip() or f"exit {done.returncode}"
        pytest.skip(f"cannot {what} here ({why}); the test needs root")


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``folder`` (made where missing), unmounted after."""
    folder.mkdir(parents=True, exist_ok=True)
    _skip_unless(_run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)), "mount")
    try:
        yield folder
    finally:
        _run("umount", "-l", str(folder))


def fill(folder: Path, leave: int = 0) -> None:
    """Fill the filesystem of ``folder`` with a file, leaving about ``leave`` bytes free."""
    stats = os.statvfs(folder)
    size = max(stats.f_bavail * stats.f_frsize - leave, 0)
    with open(folder / "filler", "ab") as filler:
        try:
            filler.write(bytes(size))
            filler.flush()
        except OSError as error:  # the last page did not fit
            if error.errno != errno.ENOSPC:
                raise


@contextlib.contextmanager
def read_only(mounted: Path) -> Iterator[None]:
    """The tmpfs mounted on ``mounted`` read-only, writable again after."""
    _skip_unless(_run("mount", "-o", "remount,ro", str(mounted)), "remount a tmpfs read-only")
    try:
        yield
    finally:
        _run("mount", "-o", "remount,rw", str(mounted))


@contextlib.contextmanager
def immutable(folder: Path) -> Iterator[None]:
    """``folder`` immutable (``chattr +i``: its files can be written, no file can be made
    in it), mutable again after."""
    _skip_unless(_run("chattr", "+i", str(folder)), "make a folder immutable (chattr +i)")
    try:
        yield
    finally:
        _run("chattr", "-i", str(folder))


def fill_memory(db: NumericsStore) -> None:
    """Fill the memory of a store kept in memory (DuckDB's buffer limit, nothing to spill
    to) with a table ``ballast`` of its own, as a file fills a disk: rows added until not
    even a few more fit (DuckDB says so at the insert, or at its commit)."""
    cursor = db._database.cursor()
    cursor.execute("CREATE TABLE ballast (value BIGINT)")
    rows = 1 << 22
    while rows >= 1 << 8:
        try:
            cursor.execute(f"INSERT INTO ballast SELECT range FROM range({rows})")
        except (duckdb.OutOfMemoryException, duckdb.TransactionException):
            rows //= 2


def store_folder(cache: Path) -> Path:
    """The folder of the one store kept in ``cache``."""
    (folder,) = cache.glob("*-v*")
    return folder


@contextlib.contextmanager
def broken_cache(tmp_path: Path, fault: str):
    """A logdir whose store was built in a cache folder (a tmpfs), runs written since (to
    be stored: a write; ``late/...``, of the same layers), and the cache folder broken by
    ``fault`` (``REASONS``)."""
    write_logdir(tmp_path / "logs", steps=12)
    with small_tmpfs(tmp_path / "cache", size="16m") as cache:
        db = NumericsStore(str(tmp_path / "logs"), cache)
        for run in db.runs():
            db.refresh(run)
        db.close()
        write_logdir(tmp_path / "logs" / "late", steps=5, seed=1)
        if fault == "full":
            fill(cache)
        faults = {"read-only": read_only(cache), "immutable": immutable(store_folder(cache))}
        with faults.get(fault, contextlib.nullcontext()):
            yield cache


def wait_every_run(server: TensorBoardProcess) -> None:
    """Wait until ``server`` serves every run of ``broken_cache``'s logdir."""

    def served() -> bool:
        where = {"run": "late/alpha", "tensor_type": "Activation"}
        steps = server.json(query("steps", **where))["steps"]
        return steps == list(range(5))

    server.wait(served, "every run to be served")
