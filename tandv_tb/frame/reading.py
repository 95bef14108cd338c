"""``read_frame``: every numerics record under a logdir as a DataFrame."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd

from tandv_tb import formats as fmt
from tandv_tb.event_files.metadata import TagInfo
from tandv_tb.event_files.record import COUNTS, STATISTICS, NumericsRecord
from tandv_tb.frame.events import read_records
from tandv_tb.frame.format_view import BlockFormatNotRecorded, block_split, format_split
from tandv_tb.frame.schema import EXP, META, METADATA_COLUMNS, NEG_INF, POS_INF, SCALAR, STR_COLUMNS


class EstimateWarning(UserWarning):
    """A format's under/overflow split was estimated from the histogram."""


def _exponent_labels(lo: int, hi: int) -> list:
    return [NEG_INF, *range(lo, hi + 1), POS_INF]


def _columns(labels: list) -> pd.MultiIndex:
    tuples = [(META, c) for c in METADATA_COLUMNS]
    tuples += [(SCALAR, c) for c in (*STATISTICS, *COUNTS)]
    tuples += [(EXP, label) for label in labels]
    return pd.MultiIndex.from_tuples(tuples)


def _build(rows: list[dict], stats: np.ndarray, counts: np.ndarray, labels: list) -> pd.DataFrame:
    data = {}
    for column in METADATA_COLUMNS:
        values = [row[column] for row in rows]
        kind = str if column in STR_COLUMNS else np.int64
        data[(META, column)] = pd.Series(values, dtype=kind)
    for i, name in enumerate(STATISTICS):
        data[(SCALAR, name)] = pd.Series(stats[:, i], dtype=np.float64)
    for name in COUNTS:
        data[(SCALAR, name)] = pd.Series([row[name] for row in rows], dtype=np.int64)
    head = pd.DataFrame(data)
    frame = pd.concat([head, pd.DataFrame(counts.astype(np.int64, copy=False))], axis=1)
    frame.columns = _columns(labels)
    return frame


def read_frame(
    logdir: str | os.PathLike, *, run: str | None = None, format: str | None = None
) -> pd.DataFrame:
    """Every numerics record under ``logdir`` (a folder or an fsspec URL: ``s3://...``) as
    a DataFrame (schema in ``tandv_tb.frame``), rows ordered by run, order and step.

    Damaged or truncated event files, records from a newer tandv_tb and malformed records do
    not stop it: they are skipped, each with a ``DataWarning`` naming the file, the tag and
    step where known, and the reason (``tandv_tb.frame.events``). ``EstimateWarning``: the
    split of ``format`` was estimated for some records.

    A block-scaled ``format`` (``tandv_tb.formats.blocks``) keeps the dtypes' bins, and
    raises ``ValueError`` where some record did not record it: it cannot be estimated."""
    seen_through = None if format is None else fmt.as_format(format)
    if seen_through is not None and not seen_through.estimable:  # as recorded, or not at all
        return _read_block_frame(logdir, run, seen_through)
    target = None if seen_through is None else seen_through.info
    entries = _sorted_records(logdir, run)
    if target is not None:
        lo, hi = target.min_exponent, target.max_exponent
    elif entries:
        lo = min(fmt.info(e[3].dtype).min_exponent for e in entries)
        hi = max(fmt.info(e[3].dtype).max_exponent for e in entries)
    else:
        lo, hi = 0, -1
    labels = _exponent_labels(lo, hi)
    counts = np.zeros((len(entries), len(labels)), dtype=np.int64)
    stats = np.full((len(entries), len(STATISTICS)), np.nan)
    rows, estimated = [], 0
    for i, (run_name, info, step, record) in enumerate(entries):
        rows.append(_metadata_row(run_name, info, step, record))
        stats[i] = [record.statistics.get(name, np.nan) for name in STATISTICS]
        if target is None:
            counts[i, 0] = record.zero_count
            counts[i, -1] = record.posinf_count + record.neginf_count
            start = 1 + record.bins_lo - lo
            counts[i, start : start + len(record.counts)] = record.counts
        else:
            low, bins, high, exact = format_split(record, target.name)
            counts[i, 0], counts[i, 1:-1], counts[i, -1] = low, bins, high
            estimated += not exact
    if estimated:
        warnings.warn(
            f"{target.name} was not recorded at tracking time for {estimated} of "
            f"{len(entries)} records: their under/overflow split is an estimate from the "
            "exponent histogram",
            EstimateWarning,
            stacklevel=2,
        )
    return _build(rows, stats, counts, labels)


def _sorted_records(logdir: str | os.PathLike, run: str | None) -> list:
    entries = list(read_records(logdir, run))
    entries.sort(key=lambda e: (e[0], e[1].order, e[2], e[1].tensor_type, e[1].name))
    return entries


def _read_block_frame(
    logdir: str | os.PathLike, run: str | None, format: fmt.BlockFormat
) -> pd.DataFrame:
    """``read_frame`` through a block format: the dtypes' bins, with the underflow in
    ``-inf`` and the overflow in ``+inf`` (``block_split``)."""
    entries = _sorted_records(logdir, run)
    missing = [e for e in entries if format not in e[3].blocks]
    if missing:
        tags = sorted({f"{e[0]}:{e[1].tensor_type}/{e[1].name}" for e in missing})
        shown = ", ".join(tags[:3]) + (f" and {len(tags) - 3} more" if len(tags) > 3 else "")
        raise ValueError(
            format.not_recorded(f"{len(missing)} of {len(entries)} records ({shown})")
        ) from BlockFormatNotRecorded(format)
    lo = min((fmt.info(e[3].dtype).min_exponent for e in entries), default=0)
    hi = max((fmt.info(e[3].dtype).max_exponent for e in entries), default=-1)
    labels = _exponent_labels(lo, hi)
    counts = np.zeros((len(entries), len(labels)), dtype=np.int64)
    stats = np.full((len(entries), len(STATISTICS)), np.nan)
    rows = []
    for i, (run_name, info, step, record) in enumerate(entries):
        rows.append(_metadata_row(run_name, info, step, record))
        stats[i] = [record.statistics.get(name, np.nan) for name in STATISTICS]
        low, bins, high = block_split(record, format)
        counts[i, 0], counts[i, -1] = low, high
        start = 1 + record.bins_lo - lo
        counts[i, start : start + len(bins)] = bins
    return _build(rows, stats, counts, labels)


def _metadata_row(run: str, info: TagInfo, step: int, record: NumericsRecord) -> dict:
    return {
        "name": info.name,
        "type": info.module_type,
        "tensor_type": info.tensor_type,
        "step": step,
        "dtype": record.dtype,
        "run": run,
        "order": info.order,
        **{name: getattr(record, name) for name in COUNTS},
    }
