"""One tag's series, assembled out of the columns the store read for several tags at once
(``NumericsStore.series`` and ``grid``): which tags hold a format, and each tag's part of
the columns, its format's counts and its exponent histograms."""

from __future__ import annotations

import numpy as np

from tandv_tb.event_files.metadata import TagInfo
from tandv_tb.event_files.record_columns import decode_rows
from tandv_tb.formats import Format
from tandv_tb.store.layout import HeldLayout
from tandv_tb.store.rows import Rows
from tandv_tb.store.series import Bins, LayerSeries

#: ``{tag: (tag_id, its metadata or None where refused, malformed records)}``
StoredTags = dict[str, tuple[int, TagInfo | None, int]]


def usable(stored: StoredTags, tag: str) -> tuple[int, TagInfo, int] | None:
    """``(tag_id, info, malformed records)`` of a tag the store holds with readable
    metadata, else None."""
    found = stored.get(tag)
    return found if found is not None and found[1] is not None else None


def recorded(
    known: list[tuple[int, TagInfo, int] | None], format: Format
) -> tuple[dict[int, int], list[int]]:
    """Where the tags hold ``format``: ``{tag_id: its position in the tag's section}`` of
    the tags that recorded it, and the tags whose casts are to be estimated (where it is
    ``estimable`` and they did not record it)."""
    recorded, estimated = {}, []
    for found in known:
        if found is None:
            continue
        tag_id, info, _ = found
        position = info.position(format)
        if position is not None:
            recorded[tag_id] = position
        elif format.estimable:
            estimated.append(tag_id)
    return recorded, estimated


def layer(
    tag: str,
    found: tuple[int, TagInfo, int] | None,
    layout: HeldLayout,
    columns: dict[str, np.ndarray],
    per_format: dict[str, np.ndarray] | Rows | None,
    vectors: Rows | None,
    format: Format | None,
) -> LayerSeries:
    """One tag's ``LayerSeries`` out of the columns read for several tags."""
    if found is None:  # -1: no tag's id, no rows
        empty = {name: layout.part(values, -1) for name, values in columns.items()}
        return LayerSeries(tag, (), layout.steps_of(-1), empty)
    tag_id, info, malformed = found
    series = LayerSeries(
        info.name,
        info.recorded,
        layout.steps_of(tag_id),
        {name: layout.part(values, tag_id) for name, values in columns.items()},
        skipped_steps=malformed,
    )
    if format is None:
        return series
    if format in series.formats and per_format is not None:
        if isinstance(per_format, dict):
            parts = {k: layout.part(v, tag_id) for k, v in per_format.items()}
        else:
            first, last = per_format.index.bounds(tag_id)
            parts = {k: v[first:last] for k, v in per_format.columns.items()}
        series.columns.update({format.column_key(k): v for k, v in parts.items()})
    elif vectors is not None:
        series.bins = bins(vectors, tag_id, len(info.formats), len(info.block_formats))
    return series


def bins(vectors: Rows, tag_id: int, n_formats: int, n_blocks: int) -> Bins:
    """The exponent histograms of one tag's rows, decoded from their stored vectors."""
    start, end = vectors.index.bounds(tag_id)
    data, offsets = vectors.vectors
    part = data[offsets[start] : offsets[end]]
    sizes = np.diff(offsets[start : end + 1])
    decoded = decode_rows(
        part,
        sizes,
        np.full(end - start, n_formats, dtype=np.int64),
        n_blocks=np.full(end - start, n_blocks, dtype=np.int64),
    )
    return Bins(decoded.bins_lo, decoded.bin_starts, decoded.bins)
