"""What the routes read: runs and tags (``listing``), numerics columns (``numerics_db``),
TensorBoard's scalars, and a cache of built responses."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np
from tensorboard.data import provider as tb_provider
from tensorboard.errors import NotFoundError

from tandv_tb.disk.metadata import TagInfo
from tandv_tb.disk.record import NumericsRecord
from tandv_tb.disk.record_columns import decode_rows, decode_tensor
from tandv_tb.numerics_db import NumericsDB, Rows
from tandv_tb.numerics_rows import HeldLayout
from tandv_tb.plugin.columns import Bins, LayerSeries, Needs
from tandv_tb.plugin.listing import Listing, RunIndex, TagEntry, provider_tags, store_tags

SCALARS_PLUGIN = "scalars"
#: Ask the provider for every scalar step it holds.
ALL_SAMPLES = 1 << 40
T = TypeVar("T")


class _LRU:
    """A thread-safe least-recently-used map bounded by a total size."""

    def __init__(self, budget: int, size: Callable[[object], int]):
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._sizes: dict = {}
        self._total = 0
        self._budget = budget
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: Hashable):
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value) -> None:
        size = self._size(value)
        with self._lock:
            if key in self._items:
                self._total -= self._sizes.pop(key)
                del self._items[key]
            self._items[key] = value
            self._sizes[key] = size
            self._total += size
            while self._total > self._budget and len(self._items) > 1:
                old, _ = self._items.popitem(last=False)
                self._total -= self._sizes.pop(old)


class NumericsStore:
    """Runs, tags and numerics from the plugin's own store (runs and tags from
    TensorBoard's listing where there is no local logdir); scalars from TensorBoard."""

    def __init__(
        self,
        data_provider: tb_provider.DataProvider,
        logdir: str | None,
        cache_dir: str | None = None,
        *,
        result_budget: int = 64 << 20,
        column_budget: int = 64 << 20,
        layout_budget: int = 80 << 20,
    ):
        self._provider = data_provider
        self._db = NumericsDB(logdir, cache_dir) if logdir and os.path.isdir(logdir) else None
        self.listing = Listing(
            store_tags(self._db, data_provider)
            if self._db is not None
            else provider_tags(data_provider)
        )
        self._worker = concurrent.futures.ThreadPoolExecutor(1, "tandv_tb responses")
        self._results = _LRU(result_budget, lambda item: _result_size(item[1]))
        self._columns = _LRU(column_budget, _held_size)
        self._layouts = _LRU(layout_budget, lambda held: held.nbytes())

    def close(self) -> None:
        self._worker.shutdown()
        if self._db is not None:
            self._db.close()

    def _store(self) -> NumericsDB:
        if self._db is None:
            raise NotFoundError(
                "the Numerics tab reads the event files under a local --logdir; start "
                "tensorboard with --logdir=<a local folder>"
            )
        return self._db

    def build_in_background(self) -> None:
        """Start reading every run into the store (``NumericsDB.build_in_background``)."""
        if self._db is not None:
            self._db.build_in_background()

    def numerics_db(self) -> NumericsDB:
        """The store of every recorded step (404 without a local logdir)."""
        return self._store()

    # -- listing ---------------------------------------------------------------------------
    def runs(self, ctx, experiment_id: str) -> dict[str, RunIndex]:
        return self.listing.runs(ctx, experiment_id)

    def run(self, ctx, experiment_id: str, run: str) -> RunIndex:
        return self.listing.run(ctx, experiment_id, run)

    def is_active(self, ctx, experiment_id: str) -> bool:
        """Whether any run holds numerics, without reading event files where it can: the
        store already holds tags (a restart), or TensorBoard lists some numerics tags."""
        if self._db is not None and self._db.has_numerics():
            return True
        listing = provider_tags(self._provider)(ctx, experiment_id, None)
        return any(listing.values())

    def version(self, run: str) -> int:
        """The run's data version, after reading what is new in its files."""
        return self._store().refresh(run)

    # -- numerics --------------------------------------------------------------------------
    def _tag_ids(self, run: str, entries: list[TagEntry]) -> list[tuple[int | None, int]]:
        """``(tag_id or None, malformed records)`` of each entry in the store."""
        self.version(run)
        stored = self._store().tags(run)
        found = []
        for entry in entries:
            known = stored.get(entry.tag)
            found.append((known[0], known[2]) if known and known[1] is not None else (None, 0))
        return found

    def series(self, run: str, entries: list[TagEntry], needs: Needs) -> list[LayerSeries]:
        """Every held step of each entry, with the columns ``needs`` names."""
        db = self._store()
        ids = self._tag_ids(run, entries)
        present = [i for i, _ in ids if i is not None]
        layout, columns = self._rows(run, present, needs.columns)
        recorded, estimated = {}, []
        for entry, (tag_id, _) in zip(entries, ids):
            if tag_id is not None and needs.format is not None:
                if needs.format in entry.info.formats:
                    recorded[tag_id] = entry.info.formats.index(needs.format)
                else:
                    estimated.append(tag_id)
        casts = self._casts(run, present, recorded, layout) if recorded else None
        vectors = db.rows(run, estimated, (), vectors=True) if estimated and needs.bins else None
        return [
            _layer(entry.info, tag_id, malformed, layout, columns, casts, vectors, needs.format)
            for entry, (tag_id, malformed) in zip(entries, ids)
        ]

    def grid(self, run: str, entries: list[TagEntry], needs: Needs) -> LayerSeries | None:
        """Every entry's columns at once, as [entries, steps] matrices, where they all hold
        the same steps and ``needs`` a format only if each of them recorded it at one place
        (nothing is estimated): a heatmap computes on one matrix instead of layer by
        layer. None otherwise (use ``series``)."""
        ids = self._tag_ids(run, entries)
        if not entries or any(tag_id is None for tag_id, _ in ids):
            return None
        formats = {entry.info.formats for entry in entries}
        if needs.format is not None and (
            len(formats) != 1 or needs.format not in entries[0].info.formats
        ):
            return None
        present = [tag_id for tag_id, _ in ids]
        layout, columns = self._rows(run, present, needs.columns)
        if layout.grid is None:
            return None
        if needs.format is not None:
            index = entries[0].info.formats.index(needs.format)
            casts = self._casts(run, present, dict.fromkeys(present, index), layout)
            if not isinstance(casts, dict):
                return None
            columns = {**columns, **{f"{k}:{needs.format}": v for k, v in casts.items()}}
        rows = [layout.grid.row_of[tag_id] for tag_id in present]
        if rows != list(range(len(rows))):  # entries not in the order of their tag ids
            columns = {name: values[rows] for name, values in columns.items()}
        return LayerSeries(entries[0].info, layout.grid.steps, columns)

    def _rows(
        self, run: str, tag_ids: list[int], columns: tuple[str, ...]
    ) -> tuple[HeldLayout, dict[str, np.ndarray]]:
        """The layout of the tags' records and their ``columns`` (with ``dtype_code``)
        arranged by it (``HeldLayout``). Each column is read once per data version of the
        run and kept (within ``column_budget``), so that another metric, column count,
        reduction or window over the same layers reads only what it has not read yet.

        The layout (``layout_budget``) and each column are kept apart: a new metric reads
        one column and arranges it, and reading many columns never evicts the layout that
        every query of the run uses."""
        columns = tuple(dict.fromkeys(("dtype_code", *columns)))
        base = (run, self.version(run), tuple(tag_ids))
        layout = self._layouts.get(base)
        held = {c: self._columns.get((*base, c)) for c in columns} if layout is not None else {}
        missing = tuple(c for c in columns if held.get(c) is None)
        found = None
        if layout is not None and missing:
            found = self._store().columns(run, tag_ids, missing, layout)
            if found is None:  # the records changed since the layout was read
                layout, held = None, {}
        if layout is None:
            rows = self._store().rows(run, tag_ids, columns)
            layout = HeldLayout.of(rows)
            self._layouts.put(base, layout)
            found = {name: layout.shape(values) for name, values in rows.columns.items()}
        for name, values in (found or {}).items():
            self._columns.put((*base, name), values)
            held[name] = values
        return layout, {c: held[c] for c in columns}

    def _casts(
        self, run: str, present: list[int], recorded: dict[int, int], layout: HeldLayout
    ) -> dict[str, np.ndarray] | Rows:
        """The exact casts of the ``recorded`` tags (``{tag_id: format index}``), kept like
        a column: arranged by the layout of ``present`` where they line up with it, else as
        ``Rows`` of their own."""
        key = (run, self.version(run), tuple(present), "casts", *sorted(recorded.items()))
        held = self._columns.get(key)
        if held is None:
            db = self._store()
            held = db.casts_in(run, recorded, layout)
            if held is None:
                held = db.casts(run, recorded)
            self._columns.put(key, held)
        return held

    def record(self, run: str, entry: TagEntry, step: int | None) -> tuple[int, NumericsRecord]:
        """The held step of ``entry`` nearest to ``step`` (the last when None; the earlier
        one on a tie) and its record; 404 when it has no readable step."""
        db = self._store()
        ((tag_id, _),) = self._tag_ids(run, [entry])
        held = db.rows(run, [tag_id], ()).steps if tag_id is not None else np.zeros(0, np.int64)
        if not len(held):
            raise NotFoundError(f"layer {entry.info.name!r} has no readable steps")
        row = len(held) - 1 if step is None else _nearest(held, step)
        found = db.rows(run, [tag_id], (), vectors=True, steps=(int(held[row]),))
        data, offsets = found.vectors
        vector = np.frombuffer(data[offsets[-2] : offsets[-1]], dtype=np.uint8)
        return int(held[row]), decode_tensor(vector, entry.info)

    # -- scalars ---------------------------------------------------------------------------
    def scalar_runs(self, ctx, experiment_id: str) -> list[str]:
        listing = self._provider.list_scalars(
            ctx, experiment_id=experiment_id, plugin_name=SCALARS_PLUGIN
        )
        return sorted(run for run, tags in listing.items() if tags)

    def scalars(self, ctx, experiment_id: str, run: str, tags: list[str] | None) -> dict:
        """``{tag: [ScalarDatum]}`` of one run; 404 for an unknown tag."""
        listing = self._provider.list_scalars(
            ctx,
            experiment_id=experiment_id,
            plugin_name=SCALARS_PLUGIN,
            run_tag_filter=tb_provider.RunTagFilter(runs=[run]),
        ).get(run, {})
        for tag in tags or ():
            if tag not in listing:
                raise NotFoundError(f"run {run!r} has no scalar tag {tag!r}")
        wanted = sorted(tags if tags else listing)
        if not wanted:
            return {}
        data = self._provider.read_scalars(
            ctx,
            experiment_id=experiment_id,
            plugin_name=SCALARS_PLUGIN,
            downsample=ALL_SAMPLES,
            run_tag_filter=tb_provider.RunTagFilter(runs=[run], tags=wanted),
        ).get(run, {})
        return {tag: data.get(tag, []) for tag in wanted}

    # -- results ---------------------------------------------------------------------------
    def on_worker(self, build: Callable[[], T]) -> T:
        """``build()``, run on the store's one worker thread (its error raised here).

        TensorBoard's server starts a thread per request, and each thread's big arrays
        came from memory the kernel had to zero again: half of a new heatmap query's time
        in the server (``perf``, 2026-11-24). One long-lived thread reuses what its last
        response freed, and building one response at a time bounds what they hold."""
        return self._worker.submit(build).result()

    def cached_result(self, key: Hashable, fingerprint: Hashable, build: Callable[[], object]):
        """``build()``'s result, cached under ``key`` while ``fingerprint`` is unchanged."""
        item = self._results.get(key)
        if item is not None and item[0] == fingerprint:
            return item[1]
        result = build()
        self._results.put(key, (fingerprint, result))
        return result


def _layer(
    info: TagInfo,
    tag_id: int | None,
    malformed: int,
    layout: HeldLayout,
    columns: dict[str, np.ndarray],
    casts: dict[str, np.ndarray] | Rows | None,
    vectors: Rows | None,
    format_name: str | None,
) -> LayerSeries:
    """One tag's ``LayerSeries`` out of the columns read for several tags."""
    tag = -1 if tag_id is None else tag_id  # -1: no tag's id, no rows
    series = LayerSeries(
        info,
        layout.steps_of(tag),
        {name: layout.part(values, tag) for name, values in columns.items()},
        skipped_steps=malformed,
    )
    if tag_id is None or format_name is None:
        return series
    if format_name in info.formats and casts is not None:
        for kind in ("underflow", "overflow"):
            if isinstance(casts, dict):
                values = layout.part(casts[kind], tag_id)
            else:
                first, last = casts.bounds(tag_id)
                values = casts.columns[kind][first:last]
            series.columns[f"{kind}:{format_name}"] = values
    elif vectors is not None:
        series.bins = _bins(vectors, tag_id, len(info.formats))
    return series


def _bins(vectors: Rows, tag_id: int, n_formats: int) -> Bins:
    """The exponent histograms of one tag's rows, decoded from their stored vectors."""
    start, end = vectors.bounds(tag_id)
    data, offsets = vectors.vectors
    part = data[offsets[start] : offsets[end]]
    sizes = np.diff(offsets[start : end + 1])
    decoded = decode_rows(part, sizes, np.full(end - start, n_formats, dtype=np.int64))
    return Bins(decoded.bins_lo, decoded.bin_starts, decoded.bins)


def _nearest(steps: np.ndarray, step: int) -> int:
    """The row of the held step nearest to ``step`` (the earlier one on a tie)."""
    right = int(np.searchsorted(steps, step, side="left"))
    if right == 0:
        return 0
    if right == len(steps):
        return right - 1
    left = right - 1
    return left if step - steps[left] <= steps[right] - step else right


def _held_size(held: Rows | np.ndarray | dict[str, np.ndarray]) -> int:
    if isinstance(held, dict):
        return sum(values.nbytes for values in held.values())
    return held.nbytes if isinstance(held, np.ndarray) else held.nbytes()


def _result_size(result: object) -> int:
    if isinstance(result, (bytes, str)):
        return len(result)
    if isinstance(result, tuple):
        return sum(_result_size(part) for part in result)
    return 1024
