"""Reading and decoding event files in a process of its own (``ReaderProcess``), for a
server whose own Python code is busy: TensorBoard reads a remote logdir (and a local one
with ``--load_fast=false``) with its Python loader, in the plugin's process, and parses
every event there holding the GIL. A store built in threads of that process waits for the
GIL at each of its many short releases (each compiled kernel, numpy operation, read and
DuckDB call gives it up and waits up to the interpreter's switch interval to get it back):
measured, the build took twice as long beside the loader as alone (``bench/RESULTS.md``).

The process reads a file's pieces (``ingest.read_piece``: ranges of bytes, framing,
scanning, decoding into the rows of the store's tables) one ahead of the store, which
writes them (DuckDB allows one writing process: the database stays in the server's). A
piece's numeric columns come back in one file of a private temporary folder (in
``/dev/shm`` where there is one: memory, not disk), read at once (through a pipe they would
come 64 KiB at a time, each read another wait for the GIL); its other columns, the run's
tags as learned and the problems met, pickled. The process has the server's
environment (credentials are found there as in the server; none is ever sent); it is
started on first use and ends with the store, or with the server. Where it dies (out of
memory, killed), the store says so in its log and reads in its own threads from then on.
"""

from __future__ import annotations

import collections
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import Future

import numpy as np

from tandv_tb.event_files.tag_table import TagTable
from tandv_tb.filesystems.locations import Location, location
from tandv_tb.store import logdir
from tandv_tb.store.ingest import READ_HERE, Columns, Decoded, Piece, read_piece
from tandv_tb.store.logdir import RunFiles, first_tags_of

logger = logging.getLogger(__name__)

_ALIGN = 64  # each column starts at a multiple of it in a file of columns
#: A piece's rows as sent back: per table None, or per column ``("file", dtype, length,
#: offset)`` (in its file of columns) or ``("object", values)``.
_Layout = dict[str, dict[str, tuple] | None]


class ReaderGone(OSError):
    """The reader process ended (killed, out of memory) or could not be started."""


class ReaderProcess:
    """Reads and decodes files' pieces (``ingest.Reading``) in a process of its own:
    ``_serve``, asked through its standard input and answering on its standard output, in
    order (anything else it prints goes to the standard error). It ends when its input
    closes: when the store closes it, or when the server ends, however it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._folder: str | None = None  # its files of columns, while it runs
        self._asked: collections.deque[Future] = collections.deque()  # answered in order
        self._failed = False  # the process died: read here from then on
        self._closed = False

    def start(self) -> None:
        """Start the process now (it imports what reading needs meanwhile)."""
        self._ask(_warm_up)

    def close(self) -> None:
        """End the process (a piece it reads is finished first)."""
        with self._lock:
            self._closed = True
            process, self._process = self._process, None
        if process is not None:
            process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._folder is not None:  # with files of pieces not used, if any
            shutil.rmtree(self._folder, ignore_errors=True)

    def pieces(
        self,
        files: RunFiles,
        name: str,
        span: tuple[int, int],
        table: TagTable,
        ids: tuple[int, int, int],
    ) -> Iterator[Piece]:
        """As ``ingest.Reading.pieces``; the next piece is read while this one is used."""
        (offset, size), (run_id, file_id, first_seq) = span, ids
        url = files.where.url

        def ask(at: int, seq: int) -> Future | None:
            known = pickle.dumps(table, pickle.HIGHEST_PROTOCOL)  # as of now, not when sent
            piece = (at, logdir.CHUNK_BYTES)  # the store's piece size, as set here
            where = (url, files.run, name)
            return self._ask(_read, where, piece, known, (run_id, file_id, seq))

        asked = ask(offset, first_seq) if offset < size else None
        try:
            while offset < size:
                try:
                    if asked is None:
                        raise ReaderGone("no reader process")
                    sent = asked.result()
                except ReaderGone:  # it ended (said in the log), or the store closes
                    asked = None
                    ids = (run_id, file_id, first_seq)
                    yield from READ_HERE.pieces(files, name, (offset, size), table, ids)
                    return
                asked = None
                if sent is None:
                    return
                piece, learned = _received(sent)
                table.update_from(learned)
                offset, first_seq = piece.end, first_seq + piece.n_values
                if offset < size:
                    asked = ask(offset, first_seq)
                yield piece
        finally:
            if asked is not None:  # not used: its file is removed when it comes
                asked.add_done_callback(_discard)

    def first_tags(self, runs: list[RunFiles]) -> list[dict[str, tuple[bytes, int]] | OSError]:
        """``logdir.first_tags_of`` the runs, in the process."""
        asked = self._ask(_first_tags, [(files.where.url, files.run) for files in runs])
        try:
            if asked is None:
                raise ReaderGone("no reader process")
            return asked.result()
        except ReaderGone:  # it ended (said in the log), or the store closes
            return first_tags_of(runs)

    def _ask(self, function, *args) -> Future | None:
        """``function(*args)`` in the process (started if it is not): its answer to come;
        None where there is no process (it died, or the store is closed)."""
        asked: Future = Future()
        with self._lock:
            if self._failed or self._closed:
                return None
            try:
                process = self._started()
            except OSError as error:
                self._failed = True
                logger.warning(
                    "tandv_tb: could not start the store's reader process (%s); reading in "
                    "the server's process",
                    error,
                )
                return None
            self._asked.append(asked)
            try:
                pickle.dump((function, args), process.stdin, pickle.HIGHEST_PROTOCOL)
                process.stdin.flush()
            except OSError as error:  # it ended meanwhile (said by the answers' reader)
                self._asked.pop()
                asked.set_exception(ReaderGone(str(error)))
        return asked

    def _started(self) -> subprocess.Popen:
        if self._process is None:
            if self._folder is None:
                shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
                self._folder = tempfile.mkdtemp(prefix="tandv_tb-reader-", dir=shm)
            command = [sys.executable, "-c", f"{_SERVE}({self._folder!r})"]
            self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            threading.Thread(
                target=self._answers,
                args=(self._process,),
                name="tandv_tb reader process answers",
                daemon=True,
            ).start()
        return self._process

    def _answers(self, process: subprocess.Popen) -> None:
        """Give each answer of the process to the call that asked, in order; when the
        process ends, the calls not answered get ``ReaderGone``."""
        while True:
            try:
                failed, answer = pickle.load(process.stdout)
            except Exception:  # ended: EOF, or a cut-short answer
                break
            with self._lock:
                asked = self._asked.popleft()
            if failed:
                asked.set_exception(answer)
            else:
                asked.set_result(answer)
        process.wait()
        with self._lock:
            left, self._asked = list(self._asked), collections.deque()
            unexpected = self._process is process and not self._closed
            if unexpected:
                self._process, self._failed = None, True
        if unexpected:
            logger.warning(
                "tandv_tb: the store's reader process ended unexpectedly (exit status %s: out "
                "of memory?); reading in the server's process from now on",
                process.returncode,
            )
        for asked in left:
            asked.set_exception(ReaderGone(f"the reader process ended ({process.returncode})"))


# -- in the reader process --------------------------------------------------------------------
_locations: dict[str, Location] = {}
_FOLDER = ""  # where this reader process writes its files of columns (``_serve``)


def _warm_up() -> None:
    from tandv_tb.event_files import fast_events  # noqa: F401 (numba's kernels loaded)


def _read(
    where: tuple[str, str, str], piece_at: tuple[int, int], known: bytes, ids: tuple[int, int, int]
) -> tuple[Piece, str | None, _Layout, TagTable] | None:
    """``read_piece`` of a file (``where``: its logdir's URL, run and name; ``piece_at``:
    offset and bytes; ``known``: the run's table, pickled), its numeric columns written to
    a file of the process's folder (the receiver removes it), with the table as it is
    after."""
    url, run, name = where
    table = pickle.loads(known)
    piece = read_piece(_run_files(url, run), name, piece_at[0], table, ids, piece_at[1])
    if piece is None:
        return None
    path, layout = _to_file(piece.decoded.rows, _FOLDER)
    piece.decoded = Decoded({}, piece.decoded.malformed)
    return piece, path, layout, table


def _first_tags(runs: list[tuple[str, str]]) -> list[dict[str, tuple[bytes, int]] | OSError]:
    """``logdir.first_tags_of`` the runs given as (their logdir's URL, run)."""
    return first_tags_of([_run_files(url, run) for url, run in runs])


def _run_files(url: str, run: str) -> RunFiles:
    where = _locations.get(url)
    if where is None:
        where = _locations[url] = location(url)
    return RunFiles(where, run)


def _to_file(rows: dict[str, Columns | None], folder: str) -> tuple[str | None, _Layout]:
    """The rows' numeric columns written into one new file of ``folder``: its path (None:
    none) and where each column lies in it."""
    layout: _Layout = {}
    size = 0
    for table, columns in rows.items():
        if columns is None:
            layout[table] = None
            continue
        layout[table] = {}
        for column, values in columns.items():
            if values.dtype == object:
                layout[table][column] = ("object", values)
            else:
                layout[table][column] = ("file", values.dtype.str, len(values), size)
                size += -(-values.nbytes // _ALIGN) * _ALIGN
    if size == 0:
        return None, layout
    handle, path = tempfile.mkstemp(dir=folder)
    with open(handle, "wb") as file:
        for table, columns in rows.items():
            for column, values in (columns or {}).items():
                where = layout[table][column]
                if where[0] == "file":
                    file.seek(where[3])
                    file.write(np.ascontiguousarray(values).data)
        file.truncate(size)
    return path, layout


# -- back in the store's process ----------------------------------------------------------------
def _received(sent: tuple[Piece, str | None, _Layout, TagTable]) -> tuple[Piece, TagTable]:
    """The piece with its columns read from their file (then removed), and the table."""
    piece, path, layout, table = sent
    data = _taken(path)
    rows: dict[str, Columns | None] = {}
    for name, columns in layout.items():
        if columns is None:
            rows[name] = None
            continue
        rows[name] = {}
        for column, where in columns.items():
            if where[0] == "object":
                rows[name][column] = where[1]
            else:
                _, dtype, length, at = where
                rows[name][column] = np.ndarray(length, np.dtype(dtype), data, at)
    piece.decoded = Decoded(rows, piece.decoded.malformed)
    return piece, table


def _taken(path: str | None) -> np.ndarray | None:
    """The bytes of a file of columns (read at once), the file removed."""
    if path is None:
        return None
    try:
        return np.fromfile(path, dtype=np.uint8)
    finally:
        os.unlink(path)


def _discard(asked: Future) -> None:
    """Remove the file of a piece read but not used."""
    if asked.exception() is None and asked.result() is not None:
        _taken(asked.result()[1])


def _serve(folder: str) -> None:
    """The reader process: answer each call read from the standard input, in order, on
    what was the standard output, until the input ends or the server is gone; then remove
    ``folder`` (its files of columns: the server may have ended without removing them).
    Ctrl-C in a terminal reaches the whole process group: the server stops on it, and this
    process when the server is gone (its input ends)."""
    global _FOLDER
    _FOLDER = folder
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything else printed goes to the standard error
    requests = sys.stdin.buffer
    try:
        while True:
            try:
                function, args = pickle.load(requests)
            except EOFError:
                return
            try:
                answer = (False, function(*args))
            except Exception as error:
                answer = (True, error)
            try:
                pickle.dump(answer, answers, pickle.HIGHEST_PROTOCOL)
                answers.flush()
            except OSError:  # the server is gone
                return
    finally:
        shutil.rmtree(folder, ignore_errors=True)


#: The reader process's program (``-c``: its module is imported, never run as a script).
_SERVE = "from tandv_tb.store.reader_process import _serve; _serve"
