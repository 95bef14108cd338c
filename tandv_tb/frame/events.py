"""Numerics records from event files, every readable one, whatever the damage.

The files are read by ``tandv_tb.event_files.event_reader`` (which says what damage is skipped, and
how) and decoded by ``tandv_tb.event_files.record_columns``. Every skip is reported with
``warnings.warn(message, DataWarning)`` (filter it, or make it an error with
``warnings.simplefilter("error", DataWarning)``): the message names the file, the reason
and, where the damage lets it be known, the tag and step.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import numpy as np

from tandv_tb.event_files.chunk_values import Chunk
from tandv_tb.event_files.event_reader import DataWarning, read_file, select_runs
from tandv_tb.event_files.metadata import TagInfo
from tandv_tb.event_files.record import NumericsRecord
from tandv_tb.event_files.record_columns import decode_rows, to_record
from tandv_tb.event_files.tag_table import TagTable
from tandv_tb.filesystems.ranges import ByteSource


def _warn(message: str) -> None:
    warnings.warn(message, DataWarning, stacklevel=3)


def _records_in_file(
    source: ByteSource, table: TagTable
) -> Iterator[tuple[TagInfo, int, NumericsRecord]]:
    """Every numerics record of one event file; ``table`` carries metadata across files."""
    for chunk in read_file(source, table):
        for problem in chunk.problems:
            _warn(problem)
        yield from _chunk_records(source.name, chunk, table)


def _chunk_records(
    path: str, chunk: Chunk, table: TagTable
) -> Iterator[tuple[TagInfo, int, NumericsRecord]]:
    infos = [table.infos[t] for t in chunk.tags.tolist()]
    n_formats = np.fromiter((len(i.formats) for i in infos), np.int64, len(infos))
    n_blocks = np.fromiter((len(i.block_formats) for i in infos), np.int64, len(infos))
    rows = decode_rows(chunk.contents, chunk.sizes, n_formats, n_blocks=n_blocks)
    malformed = np.ones(len(chunk), dtype=bool)
    malformed[rows.kept] = False
    for index in np.flatnonzero(malformed).tolist():
        _warn(
            f"{path}: skipped a malformed record of {table.names[chunk.tags[index]]!r} at step "
            f"{int(chunk.steps[index])}: not a numerics record this tandv_tb can read (wrong "
            "shape, dtype or length, inconsistent counts or block formats)"
        )
    for i, index in enumerate(rows.kept.tolist()):
        info = infos[index]
        yield info, int(chunk.steps[index]), to_record(rows, i, info.formats, info.block_formats)


def read_records(
    logdir: str | os.PathLike, run: str | None = None
) -> Iterator[tuple[str, TagInfo, int, NumericsRecord]]:
    """``(run, tag_info, step, record)`` for every readable numerics record under
    ``logdir`` (a path or a URL, ``tandv_tb.filesystems``); what cannot be read is
    skipped with a ``DataWarning`` (see the module doc)."""
    runs = select_runs(logdir, run)
    for name, files in runs.items():
        table = TagTable()
        for source in files:
            for info, step, record in _records_in_file(source, table):
                yield name, info, step, record
