"""Each run's id in the store: the one place a run's name becomes the ``run_id`` that
every table is keyed by. A run keeps its id for the database's life (the ``runs`` table
never drops one), so an id once found is kept until the store moves to another database."""

from __future__ import annotations

import threading

from tandv_tb.store.database import Database

#: The id of a run never stored: it matches no row.
NO_RUN = -1


class RunIds:
    def __init__(self, database: Database):
        self._database = database
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def find(self, run: str) -> int:
        """The run's id, ``NO_RUN`` for a run never stored."""
        found = self._ids.get(run)
        if found is None:
            row = (
                self._database.cursor()
                .execute("SELECT run_id FROM runs WHERE run = ?", [run])
                .fetchone()
            )
            if row is None:
                return NO_RUN
            found = self._ids[run] = row[0]
        return found

    def forget(self) -> None:
        """Drop the ids found: the store moved to another database (``Database.move``)."""
        with self._lock:
            self._ids.clear()

    def add(self, cursor, run: str) -> int:
        """The run's id, given now (through ``cursor``, the writer's) if it has none."""
        found = self.find(run)
        if found != NO_RUN:
            return found
        with self._lock:
            run_id = cursor.execute("SELECT coalesce(max(run_id) + 1, 0) FROM runs").fetchone()[0]
            cursor.execute("INSERT INTO runs VALUES (?, ?)", [run_id, run])
            self._ids[run] = run_id
        return run_id
