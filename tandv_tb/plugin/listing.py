"""The numerics runs and tags TensorBoard lists (metadata only), by tensor type and layer.

Runs and tags are listed through TensorBoard's data provider (both loaders), at most once
per ``LISTING_TTL``: listing is cheap because TensorBoard keeps only one step of each
numerics tag (the plugin's loader sets that default); the data themselves come from the
plugin's own store (``numerics_db``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from tensorboard.data import provider as tb_provider
from tensorboard.errors import NotFoundError

from tandv_tb.disk import metadata

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


class Listing:
    """Runs and numerics tags as TensorBoard's data provider lists them, briefly cached."""

    def __init__(self, provider, plugin_name: str = metadata.PLUGIN_NAME, ttl: float = LISTING_TTL):
        self._provider = provider
        self._plugin_name = plugin_name
        self._ttl = ttl
        self._listings: dict[tuple, tuple[float, object]] = {}
        self._lock = threading.Lock()
        self._infos: dict[bytes, tuple[metadata.TagInfo | None, str]] = {}

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
            raise NotFoundError(f"no run {run!r} with numerics{reasons}")
        return index

    def _listed(self, key: tuple, build: Callable[[], object]):
        now = time.monotonic()
        with self._lock:
            found = self._listings.get(key)
        if found is not None and now - found[0] < self._ttl:
            return found[1]
        value = build()
        with self._lock:
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
