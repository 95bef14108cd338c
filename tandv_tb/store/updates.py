"""Keeping each run of the store up to date with its event files: ``refresh`` on request,
and a build of every run in the background from the start.

A run is read when asked for (``refresh``), at most once per ``refresh_secs``: new bytes
of growing files, new files, and a file that was replaced or shrank is read again from its
start (``ingest``). Each read bumps the run's version where records were added or removed;
caches of the run's data are keyed by it. One writer at a time: a request waiting for the
write lock makes the background build yield at its next transaction.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

import duckdb

from tandv_tb.event_files.tag_table import TagTable
from tandv_tb.filesystems.locations import StorageError
from tandv_tb.store.database import Database
from tandv_tb.store.ingest import Reading, stored_tags, update_run
from tandv_tb.store.logdir import Logdir
from tandv_tb.store.run_ids import RunIds

logger = logging.getLogger(__name__)


class Updates:
    """Reads what is new in a logdir's runs into its store."""

    def __init__(
        self,
        database: Database,
        run_ids: RunIds,
        logdir: Logdir,
        refresh_secs: float,
        reading: Reading | None = None,
    ):
        self._database = database
        self._reading = reading
        self._run_ids = run_ids
        self._logdir = logdir
        self._refresh_secs = refresh_secs
        self._write_lock = threading.Lock()
        self._waiting = 0  # requests waiting for the write lock: a background build yields
        self._waiting_lock = threading.Lock()
        self._closing = threading.Event()
        self._builder: threading.Thread | None = None
        self.building: str | None = None  # the run a background build is reading
        self._checked: dict[str, float] = {}  # run -> when it was last read to its end
        self.tables: dict[str, TagTable] = {}  # run -> its tags as read
        self.versions: dict[str, int] = {}
        self._version_base = 0  # above every version of a database the store moved from
        self.failures: dict[str, StorageError] = {}  # run -> why its last read failed
        self.listing_failure: StorageError | None = None  # why the build could not list

    def refresh(self, run: str) -> int:
        """Read what is new in the run's files (unless that was done less than
        ``refresh_secs`` ago); the run's version. ``StorageError`` where the run's storage
        cannot be read, or the store cannot be written (``database.StoreUnwritable``), and
        nothing of the run was stored (otherwise what was stored is served, and the failure
        logged)."""
        now = time.monotonic()
        last = self._checked.get(run)
        if last is None or now - last >= self._refresh_secs:
            with self._waiting_lock:
                self._waiting += 1
            try:
                with self._write_lock:
                    if self._checked.get(run) == last:
                        self._update_logged(run)
                        self._checked[run] = time.monotonic()
            finally:
                with self._waiting_lock:
                    self._waiting -= 1
        failure = self.failures.get(run)
        if failure is not None and run not in self.versions:
            raise failure
        return self.versions.get(run, 0)

    def read_to_end(self) -> set[str]:
        """The runs read to their end in this process."""
        return set(self._checked)

    def was_read(self, run: str) -> bool:
        """Whether the run was read to its end in this process."""
        return run in self._checked

    def build_in_background(self, first: Callable[[list[str]], None] | None = None) -> None:
        """Read every run's event files now, in a daemon thread, as TensorBoard's own data
        server does at its start: a first start finds the store built (or building) when
        the tab first asks, instead of beginning then. A request for a run goes before it:
        the build yields the write lock after its current transaction. ``first`` is given
        the runs before any is read (to list them at once)."""
        self._builder = threading.Thread(
            target=self._build_every_run, args=(first,), name="tandv_tb store build", daemon=True
        )
        self._builder.start()

    def closing(self) -> bool:
        """Whether the store is being closed (a background build stops)."""
        return self._closing.is_set()

    def close(self) -> None:
        """Stop a background build at its next transaction, and wait for it."""
        self._closing.set()
        if self._builder is not None:
            self._builder.join()

    def _build_every_run(self, first: Callable[[list[str]], None] | None) -> None:
        try:
            runs = self._logdir.runs()
            if first is not None:
                first(runs)
        except OSError as error:  # the logdir went away: runs are read when asked for
            if isinstance(error, StorageError):
                self.listing_failure = error
            root = self._logdir.root
            logger.warning("tandv_tb: could not list the runs under %s: %s", root, error)
            return
        for run in runs:
            self.building = run
            while not self._closing.is_set():
                if self._waiting:
                    time.sleep(0.01)
                    continue
                with self._write_lock:
                    if run in self._checked or self._closing.is_set():
                        break  # a request read it meanwhile
                    if self._update_logged(run, pause=self._yield_to_requests):
                        self._checked[run] = time.monotonic()
                        break
        self.building = None

    def _yield_to_requests(self) -> bool:
        return self._waiting > 0 or self._closing.is_set()

    def _update_logged(self, run: str, pause: Callable[[], bool] | None = None) -> bool:
        """``_update`` under the write lock, a failure logged (what is stored is served):
        whether the run was read to its end."""
        cursor = self._database.cursor()
        try:
            finished = self._update(cursor, run, pause)
            self.failures.pop(run, None)
            return finished
        except StorageError as error:  # what was stored stays; tried again at a later refresh
            logger.warning("tandv_tb: could not update run %r: %s", run, error)
            self.failures[run] = error
            self.tables.pop(run, None)
            with contextlib.suppress(duckdb.Error):
                cursor.execute("ROLLBACK")
            return True
        except (duckdb.Error, OSError) as error:
            self.tables.pop(run, None)  # reloaded from what was committed
            with contextlib.suppress(duckdb.Error):
                cursor.execute("ROLLBACK")
            if not self._database.cannot_write(error):
                logger.warning("tandv_tb: could not update run %r in the store: %s", run, error)
                return True
            if not self._database.move(error):  # said in the log, once
                self.failures[run] = self._database.unwritable()
                return True
            self._moved()
            return self._update_logged(run, pause)

    def _moved(self) -> None:
        """The store moved to another database (``Database.move``), perhaps an empty one:
        every run is read again, under versions none had before (what was kept of a
        version is not that database's)."""
        self._version_base = max(self.versions.values(), default=self._version_base) + 1
        self.versions = {}
        self.tables.clear()
        self._checked.clear()
        self._run_ids.forget()

    def _update(self, cursor, run: str, pause: Callable[[], bool] | None) -> bool:
        run_id = self._run_ids.add(cursor, run)
        if run not in self.tables:
            self.tables[run] = stored_tags(cursor, run_id)
        files = self._logdir.files(run)
        changed, finished = update_run(
            cursor, files, run_id, self.tables[run], pause, self._reading
        )
        if changed or run not in self.versions:
            self.versions[run] = self.versions.get(run, self._version_base) + 1
        return finished
