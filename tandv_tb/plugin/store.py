"""Numerics over TensorBoard's data provider: tag listing, columnar series, caches.

Only the data provider is used (no files, no multiplexer), so this works on both loaders.
The run's numerics tags are listed (metadata only) at most once a second; a tag's
``(max_step, max_wall_time)`` is its *fingerprint*, and anything cached for a tag or a run is
used only while the fingerprints it was built from are unchanged: new data invalidate it.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable

from tensorboard.data import provider as tb_provider

from tandv_tb import metadata
from tandv_tb.plugin.columns import LayerSeries, decode_series
from tandv_tb.plugin.params import NotFound
from tandv_tb.plugin.reading import ALL_SAMPLES, from_arrays, read_raw

logger = logging.getLogger(__name__)

SCALARS_PLUGIN = "scalars"
#: Seconds a tag listing (and so every fingerprint) is trusted before it is asked again:
#: listing 800 tags costs tens of milliseconds, and TensorBoard reloads every few seconds.
LISTING_TTL = 1.0
_TYPE_ORDER = ("Activation", "Gradient", "Weight", "Weight_Gradient")


def tensor_type_key(tensor_type: str) -> tuple:
    """Sort key of tensor types: the contract's order, optimiser states next, others last."""
    if tensor_type in _TYPE_ORDER:
        return (0, _TYPE_ORDER.index(tensor_type), "")
    if tensor_type.startswith("Optimiser_State."):
        return (1, 0, tensor_type)
    return (2, 0, tensor_type)


@dataclasses.dataclass(frozen=True)
class TagEntry:
    """One numerics tag of a run, with its parsed metadata and fingerprint."""

    tag: str
    info: metadata.TagInfo
    max_step: int
    max_wall_time: float

    @property
    def fingerprint(self) -> tuple[int, float]:
        return (self.max_step, self.max_wall_time)


@dataclasses.dataclass(frozen=True)
class RunIndex:
    """The numerics tags of one run, by tensor type and layer name."""

    run: str
    entries: dict[tuple[str, str], TagEntry]  # (tensor_type, name) -> entry
    skipped: tuple[tuple[str, str], ...] = ()  # (tag, reason) of the tags left out

    @property
    def fingerprint(self) -> frozenset:
        return frozenset((e.tag, e.fingerprint) for e in self.entries.values())

    def tensor_types(self) -> list[str]:
        return sorted({t for t, _ in self.entries}, key=tensor_type_key)

    def layers(self, tensor_type: str) -> list[TagEntry]:
        """The layers of a tensor type in model order; 404 for an unknown type."""
        found = [e for (t, _), e in self.entries.items() if t == tensor_type]
        if not found:
            known = ", ".join(self.tensor_types())
            raise NotFound(f"run {self.run!r} has no tensor type {tensor_type!r} (it has: {known})")
        return sorted(found, key=lambda e: (e.info.order, e.info.name))

    def layer(self, tensor_type: str, name: str) -> TagEntry:
        entry = self.entries.get((tensor_type, name))
        if entry is None:
            self.layers(tensor_type)  # 404 naming the tensor type if that is what is unknown
            raise NotFound(f"run {self.run!r} has no layer {name!r} of type {tensor_type!r}")
        return entry


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
    """Reads numerics and scalars through a TensorBoard data provider, with caches."""

    def __init__(
        self,
        data_provider: tb_provider.DataProvider,
        plugin_name: str = metadata.PLUGIN_NAME,
        *,
        series_budget: int = 2 << 30,
        result_budget: int = 256 << 20,
        listing_ttl: float = LISTING_TTL,
    ):
        self._provider = data_provider
        self._listing_ttl = listing_ttl
        self._listings: dict[tuple, tuple[float, object]] = {}
        self._listings_lock = threading.Lock()
        self._plugin_name = plugin_name
        self._infos: dict[bytes, tuple[metadata.TagInfo | None, str]] = {}
        self._series = _LRU(series_budget, lambda item: item[1].nbytes())
        self._results = _LRU(result_budget, lambda item: _result_size(item[1]))
        self._load_locks: dict[tuple[str, str], threading.Lock] = collections.defaultdict(
            threading.Lock
        )
        self._locks_lock = threading.Lock()

    # -- listing ---------------------------------------------------------------------------
    def runs(self, ctx, experiment_id: str) -> dict[str, RunIndex]:
        """Every run holding numerics, by name."""

        def build():
            listing = self._provider.list_tensors(
                ctx, experiment_id=experiment_id, plugin_name=self._plugin_name
            )
            runs = {run: self._index(run, tags) for run, tags in listing.items()}
            return {
                run: index for run, index in sorted(runs.items()) if index.entries or index.skipped
            }

        return self._listed((experiment_id, None), build)

    def run(self, ctx, experiment_id: str, run: str) -> RunIndex:
        """The numerics tags of one run; 404 for a run without numerics."""

        def build():
            listing = self._provider.list_tensors(
                ctx,
                experiment_id=experiment_id,
                plugin_name=self._plugin_name,
                run_tag_filter=tb_provider.RunTagFilter(runs=[run]),
            )
            return self._index(run, listing.get(run, {}))

        index = self._listed((experiment_id, run), build)
        if not index.entries:
            reasons = "".join(f"; skipped {tag!r}: {why}" for tag, why in index.skipped[:3])
            raise NotFound(f"no run {run!r} with numerics{reasons}")
        return index

    def _listed(self, key: tuple, build: Callable[[], object]):
        """A listing, asked of the provider at most once per ``listing_ttl`` seconds."""
        now = time.monotonic()
        with self._listings_lock:
            found = self._listings.get(key)
        if found is not None and now - found[0] < self._listing_ttl:
            return found[1]
        value = build()
        with self._listings_lock:
            if len(self._listings) > 1000:
                self._listings.clear()
            self._listings[key] = (now, value)
        return value

    def _index(self, run: str, tags: dict) -> RunIndex:
        entries: dict[tuple[str, str], TagEntry] = {}
        skipped = []
        for tag in sorted(tags):
            series = tags[tag]
            info, reason = self._tag_info(series.plugin_content, run, tag)
            if info is None:
                skipped.append((tag, reason))
                continue
            key = (info.tensor_type, info.name)
            if key in entries:
                reason = f"the same layer and tensor type as tag {entries[key].tag!r}"
                skipped.append((tag, reason))
                continue
            entries[key] = TagEntry(tag, info, series.max_step, series.max_wall_time)
        return RunIndex(run, entries, tuple(skipped))

    def _tag_info(self, content: bytes, run: str, tag: str) -> tuple[metadata.TagInfo | None, str]:
        """The tag's parsed metadata, or None and why it is refused (cached by content)."""
        if content not in self._infos:
            try:
                self._infos[content] = (metadata.parse_plugin_metadata(content), "")
            except (ValueError, TypeError, KeyError) as error:  # UnsupportedVersion included
                logger.warning("skipping numerics tag %r of run %r: %s", tag, run, error)
                self._infos[content] = (None, str(error))
        return self._infos[content]

    # -- data ------------------------------------------------------------------------------
    def series(
        self, ctx, experiment_id: str, index: RunIndex, entries: Iterable[TagEntry]
    ) -> list[LayerSeries]:
        """The columnar data of the given tags of a run, read once per fingerprint."""
        entries = list(entries)
        found = self._cached_series(experiment_id, index.run, entries)
        if any(s is None for s in found):
            with self._load_lock(experiment_id, index.run):
                found = self._cached_series(experiment_id, index.run, entries)
                missing = [e for e, s in zip(entries, found) if s is None]
                if missing:
                    self._load(ctx, experiment_id, index.run, missing)
                    found = self._cached_series(experiment_id, index.run, entries)
        return found

    def _cached_series(self, experiment_id: str, run: str, entries: list[TagEntry]) -> list:
        found = []
        for entry in entries:
            item = self._series.get((experiment_id, run, entry.tag))
            found.append(item[1] if item is not None and item[0] == entry.fingerprint else None)
        return found

    def _load_lock(self, experiment_id: str, run: str) -> threading.Lock:
        with self._locks_lock:
            return self._load_locks[(experiment_id, run)]

    def _load(self, ctx, experiment_id: str, run: str, entries: list[TagEntry]) -> None:
        raw = read_raw(
            self._provider, ctx, experiment_id, self._plugin_name, run, [e.tag for e in entries]
        )
        for entry in entries:
            found = raw.get(entry.tag) or from_arrays([], [], [])
            series = decode_series(found, entry.info)
            self._series.put((experiment_id, run, entry.tag), (entry.fingerprint, series))

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
                raise NotFound(f"run {run!r} has no scalar tag {tag!r}")
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
    def cached_result(self, key: Hashable, fingerprint: Hashable, build: Callable[[], object]):
        """``build()``'s result, cached under ``key`` while ``fingerprint`` is unchanged."""
        item = self._results.get(key)
        if item is not None and item[0] == fingerprint:
            return item[1]
        result = build()
        self._results.put(key, (fingerprint, result))
        return result


def _result_size(result: object) -> int:
    if isinstance(result, (bytes, str)):
        return len(result)
    if isinstance(result, tuple):
        return sum(_result_size(part) for part in result)
    return 1024
