"""Where a logdir's numerics store lives, and opening it whatever state it was left in.

One DuckDB database per logdir (by its real path) and ``SCHEMA_VERSION`` in a cache folder
outside the logdir (read-only logdirs work). A store that cannot be opened (damaged by a
killed process, written by another ``SCHEMA_VERSION``) is rebuilt; a cache folder that
cannot be written, or a store held by another ``tensorboard`` on the same logdir, gives way
to a temporary one, with a warning: a copy of the held store where there is one (DuckDB lets
one process open a store; a copy is ~0.1 s against seconds to read the event files again,
and a copy taken in the middle of the holder's write is found damaged and rebuilt), else an
empty one. A temporary store is deleted when it is closed.
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

from tandv_tb.disk.record import COUNTS, STATISTICS

logger = logging.getLogger(__name__)

#: Bump when the tables or their stored order change: a store of another version is
#: rebuilt, never misread.
SCHEMA_VERSION = 6
#: DuckDB's buffer limit: what bounds the server's memory, whatever the logdir's size.
MEMORY_LIMIT = "256MB"
_TEMPORARY_PREFIX = "tandv_tb-"

_SCHEMA = f"""
CREATE TABLE meta (key VARCHAR, value VARCHAR);
CREATE TABLE runs (run_id INTEGER, run VARCHAR);
CREATE TABLE files (file_id INTEGER, run_id INTEGER, name VARCHAR, consumed BIGINT,
                    n_values BIGINT, head BLOB);
CREATE TABLE tags (run_id INTEGER, tag_id INTEGER, tag VARCHAR, content BLOB,
                   malformed BIGINT);
CREATE TABLE records (run_id INTEGER, file_id INTEGER, seq BIGINT, tag_id INTEGER,
                      step BIGINT, wall_time DOUBLE, dtype_code TINYINT,
                      {", ".join(f"{c} BIGINT" for c in COUNTS)},
                      {", ".join(f"{s} DOUBLE" for s in STATISTICS)},
                      vector_offset BIGINT, vector_size BIGINT, vector BLOB);
CREATE TABLE nonfinite (run_id INTEGER, file_id INTEGER, step BIGINT, position INTEGER,
                        tensor_type VARCHAR, name VARCHAR, nan BIGINT, posinf BIGINT,
                        neginf BIGINT);
CREATE TABLE scalars (run_id INTEGER, file_id INTEGER, seq BIGINT, tag VARCHAR, step BIGINT,
                      wall_time DOUBLE, value DOUBLE);
CREATE TABLE casts (run_id INTEGER, file_id INTEGER, seq BIGINT, tag_id INTEGER,
                    step BIGINT, format_index TINYINT, underflow BIGINT,
                    overflow BIGINT);
"""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tandv_tb`` (``~/.cache/tandv_tb``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tandv_tb"


def store_path(logdir: str, cache_dir: str | os.PathLike | None) -> Path:
    """The database file of a logdir: one per logdir (by its real path) and version."""
    real = os.path.realpath(logdir)
    key = hashlib.sha256(real.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    base = Path(cache_dir) if cache_dir else default_cache_dir()
    return base / f"{key}-v{SCHEMA_VERSION}" / "numerics.duckdb"


def open_store(path: Path) -> tuple[duckdb.DuckDBPyConnection, Path]:
    """A connection to the store at ``path``, or to a temporary copy of it where that cannot
    be used (with a warning), and the path it is at (see ``is_temporary``)."""
    for attempt in (path, None):
        if attempt is None:
            attempt = Path(tempfile.mkdtemp(prefix=_TEMPORARY_PREFIX)) / "numerics.duckdb"
            _copy_store(path, attempt)
        try:
            return _connect(attempt), attempt
        except (duckdb.Error, OSError) as error:
            if attempt == path:
                logger.warning(
                    "tandv_tb: cannot use the numerics store %s (%s); using a temporary "
                    "copy of it instead (what is new in the files is read into the copy)",
                    path,
                    error,
                )
            else:
                raise
    raise AssertionError("unreachable")


def close_store(connection: duckdb.DuckDBPyConnection, path: Path, requested: Path) -> None:
    """Close a store; a temporary one (``path`` is not the ``requested`` one) is deleted."""
    connection.close()
    if path != requested:
        shutil.rmtree(path.parent, ignore_errors=True)


def _copy_store(store: Path, to: Path) -> None:
    """Copy a store (the database, then its write-ahead log) where one can be read, else
    nothing (the copy starts empty)."""
    for suffix in ("", ".wal"):
        with contextlib.suppress(OSError):
            shutil.copyfile(f"{store}{suffix}", f"{to}{suffix}")


def _connect(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to a store of this version at ``path``; a damaged store or one of
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
    """The store's schema version; ``SCHEMA_VERSION`` for a new, empty database (whose
    tables are made here)."""
    tables = connection.execute("SELECT table_name FROM information_schema.tables").fetchall()
    if not tables:
        connection.execute(_SCHEMA)
        connection.execute("INSERT INTO meta VALUES ('schema', ?)", [str(SCHEMA_VERSION)])
        return str(SCHEMA_VERSION)
    found = connection.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    return found[0] if found else None
