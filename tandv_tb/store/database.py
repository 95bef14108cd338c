"""Where a logdir's store lives, and opening it whatever state it was left in.

One DuckDB database per logdir (by its real path, or its URL: a remote logdir's store is
local too) and ``SCHEMA_VERSION``, in a local folder outside the logdir (read-only logdirs
work): ``--tandv_cache_dir`` (``cache_dir``), by
default in the user's cache folder, as XDG names the place for what can be made again (the
store is rebuilt from the event files). A database that cannot be opened (damaged by a
killed process, written by another ``SCHEMA_VERSION``) is rebuilt; a folder that cannot be
written, or a database held by another ``tensorboard`` on the same logdir, gives way to a
temporary one, with a warning: a copy of the held database where there is one (DuckDB lets
one process open a database; a copy is ~0.1 s against seconds to read the event files
again, and a copy taken in the middle of the holder's write is found damaged and rebuilt),
else an empty one. A temporary database is deleted when it is closed.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

import duckdb

from tandv_tb.store.schema import SCHEMA_VERSION, create_tables

logger = logging.getLogger(__name__)

#: DuckDB's buffer limit: what bounds the server's memory, whatever the logdir's size.
MEMORY_LIMIT = "256MB"
_TEMPORARY_PREFIX = "tandv_tb-"


def default_folder() -> Path:
    """``$XDG_CACHE_HOME/tandv_tb`` (``~/.cache/tandv_tb``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tandv_tb"


def database_path(key: str, folder: str | os.PathLike | None) -> Path:
    """The database file of a logdir in ``folder`` (None: ``default_folder``): one per
    logdir (by its key: a local folder's real path, a URL and its endpoint; see
    ``logdir.Logdir.key``) and schema version."""
    key = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    base = Path(folder) if folder else default_folder()
    return base / f"{key}-v{SCHEMA_VERSION}" / "numerics.duckdb"


class Database:
    """A connection to a logdir's database, or to a temporary copy of it where that cannot
    be used (with a warning); ``path`` is where it is."""

    def __init__(self, key: str, folder: str | os.PathLike | None):
        self.requested = database_path(key, folder)
        for attempt in (self.requested, None):
            if attempt is None:
                attempt = Path(tempfile.mkdtemp(prefix=_TEMPORARY_PREFIX)) / "numerics.duckdb"
                _copy_database(self.requested, attempt)
            try:
                self._connection, self.path = _connect(attempt), attempt
                return
            except (duckdb.Error, OSError) as error:
                if attempt != self.requested:
                    raise
                logger.warning(
                    "tandv_tb: cannot use the numerics store %s (%s); using a temporary "
                    "copy of it instead (what is new in the files is read into the copy)",
                    self.requested,
                    error,
                )

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of the calling thread's own (one DuckDB connection is not
        thread-safe)."""
        return self._connection.cursor()

    def close(self) -> None:
        """Close the database; a temporary one is deleted."""
        self._connection.close()
        if self.path != self.requested:
            shutil.rmtree(self.path.parent, ignore_errors=True)


def _copy_database(database: Path, to: Path) -> None:
    """Copy a database (the file, then its write-ahead log) where one can be read, else
    nothing (the copy starts empty)."""
    for suffix in ("", ".wal"):
        with contextlib.suppress(OSError):
            shutil.copyfile(f"{database}{suffix}", f"{to}{suffix}")


def _connect(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to a database of this version at ``path``; a damaged database or one of
    another version is deleted and made anew."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        connection = _configure(duckdb.connect(str(path)))
        if _schema_version(connection) == str(SCHEMA_VERSION):
            return connection
        connection.close()
        logger.warning("tandv_tb: the numerics store %s is of another version: rebuilt", path)
    except duckdb.IOException as error:
        if "lock" in str(error).lower():
            raise  # held by another process: not ours to delete
        logger.warning("tandv_tb: the numerics store %s is damaged (%s): rebuilt", path, error)
    except duckdb.Error as error:
        logger.warning("tandv_tb: the numerics store %s is damaged (%s): rebuilt", path, error)
    for stale in path.parent.glob(path.name + "*"):  # the database and its WAL
        stale.unlink()
    connection = _configure(duckdb.connect(str(path)))
    _schema_version(connection)
    return connection


def _configure(connection: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    connection.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    connection.execute("SET threads = 2")
    return connection


def _schema_version(connection: duckdb.DuckDBPyConnection) -> str | None:
    """The database's schema version; ``SCHEMA_VERSION`` for a new, empty database (whose
    tables are made here)."""
    tables = connection.execute("SELECT table_name FROM information_schema.tables").fetchall()
    if not tables:
        create_tables(connection)
        return str(SCHEMA_VERSION)
    found = connection.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    return found[0] if found else None
