"""The numerics runs and tags of the logdir (metadata only), by tensor type and layer.

Runs and tags are listed from the plugin's own store (``tandv_tb.store``; any logdir
TensorBoard reads: a local folder, an fsspec URL, ``--logdir_spec``), as of each run's last
refresh: it finds the runs itself and knows each tag's metadata, so the tab lists a run as
soon as the store has read it, without waiting for TensorBoard's data server to read every
event file (seconds at a restart of a large logdir); a run the store has never read (a
first start) is listed as TensorBoard lists it, or from the first bytes of its first event
file where TensorBoard has not read it yet either (a sweep of many runs is listed at once),
until a route reads it, so that listing never waits for a large run to be built. A listing
is trusted for ``LISTING_TTL``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from tensorboard.data import provider as tb_provider
from tensorboard.errors import NotFoundError

from tandv_tb.event_files import metadata
from tandv_tb.store import NumericsStore

logger = logging.getLogger(__name__)

#: Seconds a tag listing is trusted before it is asked again: listing 800 tags costs tens
#: of milliseconds, and TensorBoard reloads every few seconds.
LISTING_TTL = 1.0


@dataclasses.dataclass(frozen=True)
class TagEntry:
    """One numerics tag of a run, with its parsed metadata and last step."""

    tag: str
    info: metadata.TagInfo
    max_step: int


@dataclasses.dataclass(frozen=True)
class RunIndex:
    """The numerics tags of one run, by tensor type and layer."""

    run: str
    entries: dict[tuple[str, str], TagEntry]  # (tensor_type, name) -> entry
    skipped: tuple[tuple[str, str], ...] = ()  # (tag, reason) of the tags left out

    def tensor_types(self) -> list[str]:
        return sorted({t for t, _ in self.entries}, key=metadata.tensor_type_key)

    def layers(self, tensor_type: str) -> list[TagEntry]:
        """The layers of a tensor type in model order; 404 for an unknown type."""
        found = [e for (t, _), e in self.entries.items() if t == tensor_type]
        if not found:
            known = ", ".join(self.tensor_types())
            raise NotFoundError(
                f"run {self.run!r} has no tensor type {tensor_type!r} (it has: {known})"
            )
        return sorted(found, key=lambda e: (e.info.order, e.info.name))

    def layer(self, tensor_type: str, name: str) -> TagEntry:
        entry = self.entries.get((tensor_type, name))
        if entry is None:
            self.layers(tensor_type)  # 404 naming the tensor type if that is what is unknown
            raise NotFoundError(f"run {self.run!r} has no layer {name!r} of type {tensor_type!r}")
        return entry


class TagSeries(Protocol):
    """What a listing needs of a tag (``tb_provider.TensorTimeSeries`` has it)."""

    plugin_content: bytes
    max_step: int


@dataclasses.dataclass(frozen=True)
class StoredTag:
    """A tag as the store lists it."""

    plugin_content: bytes
    max_step: int


#: ``(ctx, experiment_id, run or None for every run) -> {run: {tag: TagSeries}}``
TagSource = Callable[[object, str, str | None], dict[str, dict[str, TagSeries]]]


def provider_tags(provider, plugin_name: str = metadata.PLUGIN_NAME) -> TagSource:
    """Tags as TensorBoard's data provider lists them."""

    def list_tags(ctx, experiment_id: str, run: str | None):
        return provider.list_tensors(
            ctx,
            experiment_id=experiment_id,
            plugin_name=plugin_name,
            run_tag_filter=tb_provider.RunTagFilter(runs=[run]) if run is not None else None,
        )

    return list_tags


def store_tags(store: NumericsStore, provider) -> TagSource:
    """Tags as the plugin's store lists them: the runs under its logdir now, each as of its
    last refresh (the request handler refreshes the runs it reads first). Listing every run
    does not build the store of a run it has never read (minutes for a large logdir's
    first start): such a run is listed as TensorBoard's data provider lists it, until a
    route asks for its data, or where the provider has not read it yet (a sweep of many
    runs at a first start), from the first piece of its first event file
    (``NumericsStore.first_tags``)."""
    held: dict[str, tuple[int, dict[str, StoredTag]]] = {}  # run -> (version, its tags)
    from_provider = provider_tags(provider)

    def tags_of(run: str) -> dict[str, StoredTag]:
        version = store.version(run)
        if run not in held or held[run][0] != version:
            listed = store.tag_listing(run)
            held[run] = (version, {tag: StoredTag(*entry) for tag, entry in listed.items()})
        return held[run][1]

    def list_tags(ctx, experiment_id: str, run: str | None):
        if run is not None:
            return {name: tags_of(name) for name in [run] if store.has_run(name)}
        found, listed = {}, None
        read = store.runs_read()
        for name in store.runs():
            if name in read:
                found[name] = tags_of(name)
                continue
            if listed is None:
                listed = from_provider(ctx, experiment_id, None)
            found[name] = listed.get(name) or {
                tag: StoredTag(*entry) for tag, entry in store.first_tags(name).items()
            }
        return found

    return list_tags


class Listing:
    """Runs and numerics tags as ``source`` lists them, briefly cached."""

    def __init__(self, source: TagSource, ttl: float = LISTING_TTL):
        self._source = source
        self._ttl = ttl
        self._listings: dict[tuple, tuple[float, object]] = {}
        self._lock = threading.Lock()
        self._infos: dict[bytes, tuple[metadata.TagInfo | None, str]] = {}
        self._indexes: dict[str, tuple[object, RunIndex]] = {}  # run -> (its tags, index)

    def runs(self, ctx, experiment_id: str) -> dict[str, RunIndex]:
        """Every run holding numerics, by name."""

        def build():
            listing = self._source(ctx, experiment_id, None)
            runs = {run: self._index(run, tags) for run, tags in listing.items()}
            return {
                run: index for run, index in sorted(runs.items()) if index.entries or index.skipped
            }

        return self._listed((experiment_id, None), build)

    def run(self, ctx, experiment_id: str, run: str) -> RunIndex:
        """The numerics tags of one run; 404 for a run without numerics."""

        def build():
            return self._index(run, self._source(ctx, experiment_id, run).get(run, {}))

        index = self._listed((experiment_id, run), build)
        if not index.entries:
            reasons = "".join(f"; skipped {tag!r}: {why}" for tag, why in index.skipped[:3])
            raise NotFoundError(f"no run {run!r} with numerics{reasons}")
        return index

    def _listed(self, key: tuple, build: Callable[[], object]):
        now = time.monotonic()
        with self._lock:
            found = self._listings.get(key)
        if found is not None and now - found[0] < self._ttl:
            return found[1]
        value = build()
        self._keep(self._listings, key, (now, value))
        return value

    def _index(self, run: str, tags: dict[str, TagSeries]) -> RunIndex:
        """The run's ``RunIndex``, made again only when its source gave another listing."""
        held = self._indexes.get(run)
        if held is not None and held[0] is tags:
            return held[1]
        index = self._make_index(run, tags)
        self._keep(self._indexes, run, (tags, index))
        return index

    def _keep(self, held: dict, key, value) -> None:
        """``held[key] = value``, the map emptied first past 1,000 entries (runs come and
        go over a server's life)."""
        with self._lock:
            if len(held) > 1000:
                held.clear()
            held[key] = value

    def _make_index(self, run: str, tags: dict[str, TagSeries]) -> RunIndex:
        entries: dict[tuple[str, str], TagEntry] = {}
        skipped = []
        for tag in sorted(tags):
            series = tags[tag]
            info, reason = self._tag_info(series.plugin_content, run, tag)
            if info is None:
                if reason:  # empty: a tag of this plugin that holds no numerics
                    skipped.append((tag, reason))
                continue
            key = (info.tensor_type, info.name)
            if key in entries:
                reason = f"the same layer and tensor type as tag {entries[key].tag!r}"
                skipped.append((tag, reason))
                continue
            entries[key] = TagEntry(tag, info, series.max_step)
        return RunIndex(run, entries, tuple(skipped))

    def _tag_info(self, content: bytes, run: str, tag: str) -> tuple[metadata.TagInfo | None, str]:
        """The tag's parsed metadata, or None and why it is refused ("" for a tag that
        holds no numerics, left out silently); cached by content."""
        if content not in self._infos:
            try:
                self._infos[content] = (metadata.parse_plugin_metadata(content), "")
            except metadata.NotNumerics:  # the non-finite watch's record: not a layer
                self._infos[content] = (None, "")
            except (ValueError, TypeError, KeyError) as error:  # UnsupportedVersion included
                logger.warning("skipping numerics tag %r of run %r: %s", tag, run, error)
                self._infos[content] = (None, str(error))
        return self._infos[content]
