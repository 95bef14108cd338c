"""Where a logdir's store lives, and opening it whatever state it was left in.

One DuckDB database per logdir (by its real path, or its URL: a remote logdir's store is
local too) and ``SCHEMA_VERSION``, in a local folder outside the logdir (read-only logdirs
work): ``--tandv_cache_dir`` (``cache_dir``), by
default in the user's cache folder, as XDG names the place for what can be made again (the
store is rebuilt from the event files). A database that cannot be opened (damaged by a
killed process, written by another ``SCHEMA_VERSION``) is rebuilt.

A store that cannot be kept there gives way to a temporary one, with one warning (and a
``notice`` for the tab): where its folder cannot be written (disk full, quota, read-only),
at the start or at any later write (``Database.move``; a full disk is met at a commit), or
where another ``tensorboard`` on the same logdir holds it (DuckDB lets one process open a
database). The temporary store is a copy of the database where there is one (~0.1 s
against seconds to read the event files again; a copy taken in the middle of the holder's
write is found damaged and rebuilt) in the system's temporary folder, else (that folder
cannot be written either) an empty one in memory; it is deleted when it is closed. Where
even memory fails (DuckDB's buffer limit, with no disk to spill to), ``StoreUnwritable``
says why, for each place tried.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

import duckdb

from tandv_tb.filesystems.locations import StorageError
from tandv_tb.store.schema import SCHEMA_VERSION, create_tables

logger = logging.getLogger(__name__)

#: DuckDB's buffer limit: what bounds the server's memory, whatever the logdir's size.
MEMORY_LIMIT = "256MB"
_TEMPORARY_PREFIX = "tandv_tb-"
#: What a write meets where a folder cannot take it: no space, a quota, a read-only or
#: immutable folder, no permission (DuckDB gives the system's words in its messages).
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
_CANNOT_WRITE = tuple(os.strerror(code) for code in _WRITE_ERRNOS)


class StoreUnwritable(StorageError):
    """The store could be written nowhere: not in its folder, the temporary folder or
    memory. Answered 503 (``kind`` ``cache``) with each place's reason."""

    def __init__(self, message: str, kind: str = "cache"):
        super().__init__(message, kind)


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


def cannot_write(error: BaseException) -> bool:
    """Whether ``error`` (DuckDB's or the system's) says a folder cannot be written: no
    space, a quota, a read-only or immutable folder, no permission."""
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno in _WRITE_ERRNOS
    return any(reason in str(error) for reason in _CANNOT_WRITE)


class Database:
    """A connection to a logdir's database, or to a temporary one where that cannot be
    used (``move``); ``path`` is where it is (None: in memory), ``notice`` why it is not
    where it was asked for (None: it is)."""

    def __init__(self, key: str, folder: str | os.PathLike | None):
        self.requested = database_path(key, folder)
        self.path: Path | None = self.requested
        self.notice: str | None = None
        self._failed: list[str] = []  # "<place> (<why>)" of each place given up
        self._made: list[Path] = []  # temporary folders made, deleted at ``close``
        self._retired: list[duckdb.DuckDBPyConnection] = []  # may still serve a read
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._gave_up = False  # no place left: every write fails
        try:
            self._connection = _connect(self.requested)
        except (duckdb.Error, OSError) as error:
            if not self.move(error):
                raise self.unwritable() from None

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of the calling thread's own (one DuckDB connection is not
        thread-safe)."""
        return self._connection.cursor()

    def cannot_write(self, error: BaseException) -> bool:
        """Whether ``error`` is DuckDB's, saying this place cannot take the store (for the
        store in memory: its buffer limit reached); not an event file's own error."""
        if not isinstance(error, duckdb.Error):
            return False
        if self.path is None and (
            isinstance(error, duckdb.OutOfMemoryException) or "could not allocate" in str(error)
        ):
            return True  # as a commit says it too
        return cannot_write(error)

    def move(self, error: BaseException) -> bool:
        """Carry on in the next place (the temporary folder, then memory) after ``error``
        of this one, said once in the log and in ``notice``: whether the store moved (its
        readers then read everything again: the new one may start empty). Connections of
        the place left stay open until ``close`` (a read may still be using them)."""
        if self._gave_up:
            return False
        self._failed.append(_failure(self.path, error))
        places: list[Path | None] = [] if self.path is None else [None]
        if self.path is not None and self.path.parent not in self._made:
            places.insert(0, self.path)
        for place in places:
            try:
                if place is None:
                    connection, path = _in_memory(), None
                else:
                    path = self._temporary_copy(place)
                    connection = _connect(path)
            except (duckdb.Error, OSError) as failed:
                self._failed.append(_failure(None if place is None else _TEMPORARY, failed))
                continue
            if self._connection is not None:
                self._retired.append(self._connection)
            self._connection, self.path = connection, path
            kept = f"a temporary copy is kept in {path.parent}" if path else "it is kept in memory"
            self.notice = (
                f"cannot write the numerics store in {', nor in '.join(self._failed)}; {kept} "
                f"until this process ends ({_advice(error)})"
            )
            logger.warning("tandv_tb: %s", self.notice)
            return True
        self._gave_up = True
        self.notice = str(self.unwritable())  # what is stored is served, perhaps not all
        logger.warning("tandv_tb: %s", self.notice)
        return False

    def unwritable(self) -> StoreUnwritable:
        """Why the store could be written nowhere."""
        return StoreUnwritable(
            f"cannot write the numerics store in {', nor in '.join(self._failed)} "
            "(free space, or give --tandv_cache_dir a folder that can be written)"
        )

    def close(self) -> None:
        """Close the database; a temporary one is deleted."""
        for connection in (*self._retired, self._connection):
            if connection is not None:
                with contextlib.suppress(duckdb.Error):  # its last checkpoint may not fit
                    connection.close()
        for folder in self._made:
            shutil.rmtree(folder, ignore_errors=True)

    def _temporary_copy(self, database: Path) -> Path:
        """A new folder of the system's temporary folder, with a copy of ``database``
        where it can be read."""
        folder = Path(tempfile.mkdtemp(prefix=_TEMPORARY_PREFIX))
        self._made.append(folder)
        path = folder / "numerics.duckdb"
        _copy_database(database, path)
        return path


#: Stands for the system's temporary folder in messages (``Database.move``).
_TEMPORARY = Path(_TEMPORARY_PREFIX)


def _in_memory() -> duckdb.DuckDBPyConnection:
    """A new, empty database in memory, within DuckDB's buffer limit (nothing spills: it
    would go to a ``.tmp`` folder of the working folder)."""
    connection = _configure(duckdb.connect(":memory:"))
    connection.execute("SET temp_directory = ''")
    _schema_version(connection)
    return connection


def _failure(path: Path | None, error: BaseException) -> str:
    """A place and why it could not take the store, for messages."""
    if path is None:
        where = "memory"
    elif path == _TEMPORARY:
        where = f"the temporary folder {tempfile.gettempdir()}"
    else:
        where = str(path.parent)
    return f"{where} ({_reason(error)})"


def _reason(error: BaseException) -> str:
    """What went wrong, short: the system's reason where a folder cannot be written, else
    the error's first line."""
    text = str(error).strip()
    found = [reason for reason in _CANNOT_WRITE if reason in text]
    if found:
        return found[0]
    return text.splitlines()[0] if text else type(error).__name__


def _advice(error: BaseException) -> str:
    """What to do about ``error`` of the store's folder."""
    if not cannot_write(error):  # held by another process, or no folder at all
        return "give --tandv_cache_dir another folder to keep a store of its own"
    full = any(os.strerror(code) in _reason(error) for code in (errno.ENOSPC, errno.EDQUOT))
    fix = "free space there" if full else "make it writable"
    return f"{fix}, or give --tandv_cache_dir another folder"


def _copy_database(database: Path, to: Path) -> None:
    """Copy a database (the file, then its write-ahead log) where one can be read, else
    nothing (the copy starts empty). A part that does not fit is left out whole: the file
    alone is the database as of its last checkpoint."""
    for suffix in ("", ".wal"):
        try:
            shutil.copyfile(f"{database}{suffix}", f"{to}{suffix}")
        except OSError:
            for part in ("", ".wal")[("", ".wal").index(suffix) :]:
                with contextlib.suppress(OSError):
                    os.unlink(f"{to}{part}")
            return


def _connect(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to a database of this version at ``path``; a damaged database or one of
    another version is deleted and made anew. A folder that cannot be written and a
    database held by another process raise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection, existed = None, path.exists()
    try:
        connection = _configure(duckdb.connect(str(path)))
        if _schema_version(connection) == str(SCHEMA_VERSION):
            return connection
        connection.close()
        logger.warning("tandv_tb: the numerics store %s is of another version: rebuilt", path)
    except duckdb.Error as error:
        if connection is not None:
            with contextlib.suppress(duckdb.Error):
                connection.close()
        if "lock" in str(error).lower() or cannot_write(error):
            if not existed:  # what it began to write is no database (nor to be copied)
                with contextlib.suppress(OSError):
                    path.unlink()
            raise  # held by another process, or a folder it cannot write: not damaged
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
