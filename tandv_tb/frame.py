"""pandas interop: numerics event files as a DataFrame (the contract's schema), and back.

``read_frame`` reads every event file under a logdir into a DataFrame whose columns are a
MultiIndex with three top levels:

- ``metadata``: name, type, tensor_type, step, dtype, run, order;
- ``scalar_stats``: the 9 statistics of ``STATISTICS``, then the counts numel, zero_count,
  nan_count, posinf_count, neginf_count;
- ``exponent_counts``: the int bins ``n`` plus the float labels ``-inf`` and ``+inf``.
  Without a format they span the dtypes' whole range, ``-inf`` holds the zeros and ``+inf``
  the infinities. With ``format=F`` they span F's range: ``-inf`` holds the zeros plus the
  values that underflow in F, ``+inf`` the values that overflow plus the infinities, and
  every other value stays in its own bin, clamped into F's range (``format_split``).

For a format that was not recorded at tracking time the split is an estimate (and
``read_frame`` warns): the values of each bin ``[2**n, 2**(n+1))`` are taken as spread
uniformly in ``log2|x|``, the part of a bin beyond F's cast thresholds (found with ml_dtypes
by ``formats.cast_thresholds``) counts as underflow/overflow, rounded to whole values.

tandv (graphcore-research/track-and-visualize) logframes, as found in its source
(``tandv/track/common/_types.py``, ``_utils.py``, ``track/torch/stash_values.py``):

- columns ``metadata``: step, name, type (``str(type(module))`` or None for parameters),
  tensor_type (``Activation``, ``Gradient``, ``Weights``, ``Weight_Gradients``,
  ``Optimiser_State.<key>``), dtype (``torch.``/``jax`` prefix stripped: ``float32``);
  ``scalar_stats``: mean, std, mean_abs, max_abs, min_abs, rm2, rm4, rm8; ``exponent_counts``:
  ``-inf``, the ints -16..16, ``inf``. Its validator accepts no other metadata column.
- its ``std`` is torch's default, the *sample* standard deviation (ours is the population
  one): ``write_frame``/``to_tandv`` convert with the tensor's count N (factor
  sqrt((N-1)/N) and back).
- its bins come from ``torch.frexp``: label ``e`` counts ``2**(e-1) <= |x| < 2**e``, i.e. our
  bin ``n = e - 1`` (``TANDV_BIN_SHIFT``); exponents beyond -16..16 go to ``-inf``/``inf``,
  and zeros, NaN and Inf all land in its label 0 (frexp gives them exponent 0). So
  ``write_frame`` of a tandv frame puts label ``e`` in bin ``e - 1``, its ``-inf``/``inf``
  counts in the bins just beyond (-18 and 16), and cannot tell zeros, NaN or Inf apart:
  it records zero_count = nan_count = inf counts = 0 and numel = the sum of the counts.
  ``to_tandv`` maps bin ``n`` to label ``n + 1`` (clamped into ``-inf``/``inf``) and puts
  zeros in ``-inf`` and infinities in ``inf`` (our contract's meaning of those labels).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from tandv_tb import formats as fmt
from tandv_tb.metadata import (
    PLUGIN_NAME,
    TagInfo,
    is_tensor_type,
    parse_plugin_metadata,
)
from tandv_tb.stats.record import COUNTS, STATISTICS, NumericsRecord
from tandv_tb.summary import decode_tensor
from tandv_tb.writer import NumericsWriter

META, SCALAR, EXP = "metadata", "scalar_stats", "exponent_counts"
NEG_INF, POS_INF = float("-inf"), float("inf")
METADATA_COLUMNS = ("name", "type", "tensor_type", "step", "dtype", "run", "order")
_STR_COLUMNS = ("name", "type", "tensor_type", "dtype", "run")

TANDV_METADATA = ("step", "name", "type", "tensor_type", "dtype")
TANDV_STATISTICS = ("mean", "std", "mean_abs", "max_abs", "min_abs", "rm2", "rm4", "rm8")
TANDV_EXPONENTS = range(-16, 17)
#: Our bin n is tandv's (frexp) label e minus one.
TANDV_BIN_SHIFT = -1
_TANDV_TO_OURS = {"Weights": "Weight", "Weight_Gradients": "Weight_Gradient"}
_OURS_TO_TANDV = {v: k for k, v in _TANDV_TO_OURS.items()}


class SchemaError(ValueError):
    """A DataFrame does not follow the numerics schema."""


class DataWarning(UserWarning):
    """Some stored numerics could not be read (damaged file, newer version, bad record)."""


class EstimateWarning(UserWarning):
    """A format's under/overflow split was estimated from the histogram."""


# --------------------------------------------------------------------------- reading


def _runs(logdir: Path) -> dict[str, list[Path]]:
    """Event files by run, the run named as TensorBoard names it ("." for logdir)."""
    runs: dict[str, list[Path]] = {}
    for directory, subdirs, files in os.walk(logdir):
        subdirs.sort()
        events = sorted(f for f in files if "tfevents" in f)
        if events:
            run = os.path.relpath(directory, logdir).replace(os.sep, "/")
            runs[run] = [Path(directory) / f for f in events]
    return runs


def _warn(message: str) -> None:
    warnings.warn(message, DataWarning, stacklevel=4)


def _records_in_file(
    path: Path, tags: dict[str, TagInfo | Exception | None]
) -> Iterator[tuple[TagInfo, int, NumericsRecord]]:
    """Every numerics record of one event file; ``tags`` carries metadata across files."""
    consumed = 0
    refused: set[str] = set()
    for raw in RawEventFileLoader(str(path)).Load():
        consumed += len(raw) + 16  # length (8) + its crc (4) + data + data crc (4)
        try:
            event = event_pb2.Event.FromString(raw)
        except DecodeError:
            _warn(f"{path}: skipped an event that is not a valid Event proto")
            continue
        for value in event.summary.value:
            if value.HasField("metadata"):
                tags.setdefault(value.tag, _tag_info(value.metadata))
            info = tags.get(value.tag)
            if info is None:
                continue
            if isinstance(info, Exception):
                if value.tag not in refused:
                    refused.add(value.tag)
                    _warn(f"{path}: skipped the records of tag {value.tag!r}: {info}")
                continue
            try:
                record = decode_tensor(tensor_util.make_ndarray(value.tensor), info)
            except (ValueError, TypeError) as error:
                _warn(
                    f"{path}: skipped a malformed record of {value.tag!r} at step "
                    f"{event.step}: {error}"
                )
                continue
            yield info, event.step, record
    size = path.stat().st_size
    if consumed != size:
        _warn(
            f"{path} is damaged or truncated after byte {consumed} of {size}: read the "
            "records before the damage, skipped the rest"
        )


def _tag_info(metadata) -> TagInfo | Exception | None:
    if metadata.plugin_data.plugin_name != PLUGIN_NAME:
        return None
    try:
        return parse_plugin_metadata(metadata.plugin_data.content)
    except ValueError as error:  # UnsupportedVersion included
        return error


def read_records(
    logdir: str | os.PathLike, run: str | None = None
) -> Iterator[tuple[str, TagInfo, int, NumericsRecord]]:
    """``(run, tag_info, step, record)`` for every numerics record under ``logdir``."""
    root = Path(logdir)
    if not root.is_dir():
        raise FileNotFoundError(f"no such log directory: {str(root)!r}")
    runs = _runs(root)
    if run is not None:
        if run not in runs:
            raise ValueError(f"no run {run!r} under {str(root)!r}; runs: {sorted(runs)}")
        runs = {run: runs[run]}
    for name, files in runs.items():
        tags: dict[str, TagInfo | Exception | None] = {}
        for path in files:
            for info, step, record in _records_in_file(path, tags):
                yield name, info, step, record


# ------------------------------------------------------------------ format split


def _take_from_bottom(counts: np.ndarray, amount: int) -> np.ndarray:
    """``counts`` less ``amount`` values taken from its lowest entries up."""
    before = np.cumsum(counts) - counts
    return counts - np.clip(amount - before, 0, counts)


def _estimated_casts(record: NumericsRecord, format: str) -> tuple[int, int]:
    """Under/overflow of ``format`` estimated from the bins (rule in the module doc)."""
    thresholds = fmt.cast_thresholds(record.dtype, format)
    n = record.bins_lo + np.arange(len(record.counts), dtype=np.float64)
    under = thresholds.under_pos
    over = thresholds.over_pos
    under_part = np.clip(math.log2(under) - n, 0.0, 1.0) if under > 0 else np.zeros_like(n)
    over_part = np.clip(n + 1 - math.log2(over), 0.0, 1.0) if math.isfinite(over) else 0 * n
    under_count = float(record.counts @ under_part)
    over_count = float(record.counts @ over_part)
    return int(round(under_count)), int(round(over_count))


def format_split(record: NumericsRecord, format: str) -> tuple[int, np.ndarray, int, bool]:
    """``(low, counts, high, exact)``: the record seen through ``format`` F.

    ``counts[i]`` is the number of values in bin ``info(F).min_exponent + i`` once clamped
    into F's range; ``low`` holds the zeros plus the underflow, ``high`` the overflow plus the
    infinities. ``exact`` is False where F was not recorded and the casts were estimated.
    The underflow is taken from the lowest bins and the overflow from the highest, which is
    exact for every format whose casts are symmetric in sign and keep zero (all but
    ``float8_e8m0fnu``, where zeros and negative values become NaN).
    """
    target = fmt.info(format)
    counts = np.asarray(record.counts, dtype=np.int64)
    exact = target.name in record.underflow
    if exact:
        under, over = record.underflow[target.name], record.overflow[target.name]
    else:
        under, over = _estimated_casts(record, target.name)
    nonzero = int(counts.sum())
    under = min(under, nonzero)
    kept = _take_from_bottom(counts, under)
    over_from_bins = min(over, int(kept.sum()))
    kept = _take_from_bottom(kept[::-1], over_from_bins)[::-1]
    over_from_zeros = min(over - over_from_bins, record.zero_count)  # e.g. float8_e8m0fnu
    bins = np.zeros(target.n_bins, dtype=np.int64)
    if len(kept):
        where = (
            np.clip(record.bins_lo + np.arange(len(kept)), target.min_exponent, target.max_exponent)
            - target.min_exponent
        )
        np.add.at(bins, where, kept)
    low = record.zero_count - over_from_zeros + under
    high = over_from_bins + over_from_zeros + record.posinf_count + record.neginf_count
    return low, bins, high, exact


# ------------------------------------------------------------------- the frame


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
        kind = str if column in _STR_COLUMNS else np.int64
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
    """Every numerics record under ``logdir`` as a DataFrame (schema in the module doc),
    rows ordered by run, order and step."""
    target = fmt.info(fmt.numpy_dtype(format).name) if format is not None else None
    entries = list(read_records(logdir, run))
    entries.sort(key=lambda e: (e[0], e[1].order, e[2], e[1].tensor_type, e[1].name))
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


# ------------------------------------------------------------------- validation


def _column_error(column: tuple, problem: str) -> SchemaError:
    return SchemaError(f"column {column!r}: {problem}")


def _check_strings(df: pd.DataFrame, column: tuple, allow_empty: bool = True) -> None:
    values = df[column]
    if not pd.api.types.is_string_dtype(values) or values.isna().any():
        raise _column_error(column, "must hold strings")
    if not allow_empty and (values == "").any():
        raise _column_error(column, "must hold non-empty strings")


def _check_ints(df: pd.DataFrame, column: tuple, minimum: int | None = 0) -> None:
    values = df[column]
    if not pd.api.types.is_integer_dtype(values) or pd.api.types.is_bool_dtype(values):
        raise _column_error(column, f"must hold integers, has dtype {values.dtype}")
    if minimum is not None and len(values) and values.min() < minimum:
        raise _column_error(column, f"must hold integers >= {minimum}")


def _check_exponent_counts(df: pd.DataFrame) -> None:
    """Every ``exponent_counts`` column holds non-negative integers (checked as a block)."""
    block = df[EXP]
    for label, dtype in block.dtypes.items():
        if not pd.api.types.is_integer_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
            raise _column_error((EXP, label), f"must hold integers, has dtype {dtype}")
    if len(block) and block.shape[1]:
        negative = (block.to_numpy() < 0).any(axis=0)
        if negative.any():
            label = block.columns[int(np.flatnonzero(negative)[0])]
            raise _column_error((EXP, label), "must hold integers >= 0")


def _check_dtypes(df: pd.DataFrame, column: tuple) -> None:
    for value in pd.unique(df[column]):
        try:
            fmt.numpy_dtype(value)
        except (TypeError, ValueError):
            raise _column_error(column, f"{value!r} is not a float dtype name") from None


def _exponent_columns(df: pd.DataFrame) -> tuple[list[int], list]:
    """The int labels (sorted) of ``exponent_counts``; SchemaError for bad labels."""
    if not isinstance(df.columns, pd.MultiIndex) or df.columns.nlevels != 2:
        raise SchemaError("columns must be a 2-level pandas MultiIndex")
    labels = [label for top, label in df.columns if top == EXP]
    for required in (NEG_INF, POS_INF):
        if required not in labels:
            raise _column_error((EXP, required), "is missing")
    ints = []
    for label in labels:
        if isinstance(label, (int, np.integer)) and not isinstance(label, bool):
            ints.append(int(label))
        elif not (isinstance(label, float) and math.isinf(label)):
            raise _column_error((EXP, label), "labels must be ints or the floats -inf/+inf")
    return sorted(ints), labels


def validate(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` itself if it follows the schema, else ``SchemaError`` naming the column."""
    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"expected a pandas DataFrame, got {type(df).__name__}")
    _, labels = _exponent_columns(df)
    tops = list(df.columns.get_level_values(0).unique())
    for top in (META, SCALAR):
        if top not in tops:
            raise SchemaError(f"top-level column {top!r} is missing")
    for top in tops:
        if top not in (META, SCALAR, EXP):
            raise SchemaError(f"unknown top-level column {top!r}")
    for column in METADATA_COLUMNS:
        if (META, column) not in df.columns:
            raise _column_error((META, column), "is missing")
    for column in df[META].columns:
        if column not in METADATA_COLUMNS:
            raise _column_error((META, column), "is not a metadata column of the schema")
    for column in ("type", "run", "dtype", "tensor_type"):
        _check_strings(df, (META, column))
    _check_strings(df, (META, "name"), allow_empty=False)
    _check_ints(df, (META, "step"))
    _check_ints(df, (META, "order"), minimum=None)
    _check_dtypes(df, (META, "dtype"))
    bad = [t for t in pd.unique(df[(META, "tensor_type")]) if not is_tensor_type(t)]
    if bad:
        raise _column_error((META, "tensor_type"), f"unknown tensor types {bad}")
    for column in df[SCALAR].columns:
        values = df[(SCALAR, column)]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            raise _column_error((SCALAR, column), "must be numeric")
    for name in COUNTS:
        if (SCALAR, name) in df.columns:
            _check_ints(df, (SCALAR, name))
    _check_exponent_counts(df)
    if (SCALAR, "numel") in df.columns:
        nan = df[(SCALAR, "nan_count")] if (SCALAR, "nan_count") in df.columns else 0
        total = df[EXP].sum(axis=1)
        broken = total != df[(SCALAR, "numel")] - nan
        if broken.any():
            row = int(np.flatnonzero(broken.to_numpy())[0])
            raise _column_error(
                (EXP, "*"), f"row {row} adds up to {total.iloc[row]}, not numel - nan_count"
            )
    return df


# ------------------------------------------------------------------- writing


def _load(frame: pd.DataFrame | str | os.PathLike) -> pd.DataFrame:
    if isinstance(frame, pd.DataFrame):
        return frame
    if isinstance(frame, (str, os.PathLike)):
        loaded = pd.read_pickle(frame)
        if not isinstance(loaded, pd.DataFrame):
            raise SchemaError(f"{str(frame)!r} holds a {type(loaded).__name__}, not a DataFrame")
        return loaded
    raise TypeError(
        f"expected a DataFrame or the path of a pickled one, got {type(frame).__name__}"
    )


def _is_tandv(df: pd.DataFrame) -> bool:
    columns = set(df.columns) if isinstance(df.columns, pd.MultiIndex) else set()
    return (META, "run") not in columns and (META, "order") not in columns


def _validate_tandv(df: pd.DataFrame) -> None:
    """tandv's own schema: its 5 metadata columns, numeric stats, int exponent counts."""
    ints, labels = _exponent_columns(df)
    for column in TANDV_METADATA:
        if (META, column) not in df.columns:
            raise _column_error((META, column), "is missing")
    _check_strings(df, (META, "name"), allow_empty=False)
    _check_strings(df, (META, "tensor_type"))
    _check_strings(df, (META, "dtype"))
    _check_ints(df, (META, "step"))
    _check_dtypes(df, (META, "dtype"))
    mapped = df[(META, "tensor_type")].map(lambda t: _TANDV_TO_OURS.get(t, t))
    bad = [t for t in pd.unique(mapped) if not is_tensor_type(t)]
    if bad:
        raise _column_error((META, "tensor_type"), f"unknown tensor types {bad}")
    _check_exponent_counts(df)


def _module_type(value: object) -> str:
    if not isinstance(value, str):
        return ""
    match = re.fullmatch(r"<class '(?:[\w.]*\.)?(\w+)'>", value)
    return match.group(1) if match else value


def _column_or(df: pd.DataFrame, column: tuple, default: float | int) -> np.ndarray:
    if column in df.columns:
        return df[column].to_numpy()
    return np.full(len(df), default)


def _frame_records(df: pd.DataFrame, tandv: bool) -> list[NumericsRecord]:
    """One NumericsRecord per row (rules in the module doc)."""
    ints, _ = _exponent_columns(df)
    shift = TANDV_BIN_SHIFT if tandv else 0
    matrix = df[EXP][ints].to_numpy(np.int64) if ints else np.zeros((len(df), 0), np.int64)
    low, high = df[(EXP, NEG_INF)].to_numpy(np.int64), df[(EXP, POS_INF)].to_numpy(np.int64)
    zeros = _column_or(df, (SCALAR, "zero_count"), 0).astype(np.int64)
    posinf = _column_or(df, (SCALAR, "posinf_count"), 0).astype(np.int64)
    neginf = _column_or(df, (SCALAR, "neginf_count"), 0).astype(np.int64)
    nan = _column_or(df, (SCALAR, "nan_count"), 0).astype(np.int64)
    low_extra, high_extra = low - zeros, high - posinf - neginf
    if (low_extra < 0).any():
        raise _column_error((EXP, NEG_INF), "holds fewer values than zero_count")
    if (high_extra < 0).any():
        raise _column_error((EXP, POS_INF), "holds fewer values than posinf + neginf counts")
    total = nan + low + high + matrix.sum(axis=1)
    numel = _column_or(df, (SCALAR, "numel"), -1).astype(np.int64)
    numel = np.where(numel < 0, total, numel)
    if (numel != total).any():
        raise _column_error((SCALAR, "numel"), "differs from the sum of the exponent counts")
    stats = {name: _column_or(df, (SCALAR, name), np.nan).astype(np.float64) for name in STATISTICS}
    if tandv:  # sample -> population standard deviation
        n = numel.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats["std"] = np.where(n > 1, stats["std"] * np.sqrt((n - 1) / n), np.nan)
    first = (ints[0] if ints else 0) + shift - 1
    last = (ints[-1] if ints else 0) + shift + 1
    dtypes = [fmt.canonical_name(d) for d in df[(META, "dtype")]]
    records = []
    for i, dtype in enumerate(dtypes):
        info = fmt.info(dtype)
        full = np.zeros(info.n_bins, dtype=np.int64)
        where = (
            np.clip(
                np.array([first, *(x + shift for x in ints), last]),
                info.min_exponent,
                info.max_exponent,
            )
            - info.min_exponent
        )
        np.add.at(full, where, [low_extra[i], *matrix[i], high_extra[i]])
        nonzero = np.flatnonzero(full)
        lo, hi = (int(nonzero[0]), int(nonzero[-1])) if len(nonzero) else (0, -1)
        records.append(
            NumericsRecord(
                dtype=dtype,
                numel=int(numel[i]),
                zero_count=int(zeros[i]),
                nan_count=int(nan[i]),
                posinf_count=int(posinf[i]),
                neginf_count=int(neginf[i]),
                bins_lo=info.min_exponent + lo if len(nonzero) else 0,
                counts=full[lo : hi + 1].copy(),
                statistics={name: float(stats[name][i]) for name in STATISTICS},
            )
        )
    return records


def write_frame(frame: pd.DataFrame | str | os.PathLike, logdir: str | os.PathLike) -> None:
    """Write a frame (our schema, or a tandv logframe or its pickle's path) as numerics
    event files under ``logdir``: one run per distinct ``run`` value (tandv frames: into
    ``logdir`` itself).

    A frame read without a format round-trips exactly (the recorded formats' under/overflow
    excepted: a frame does not hold them). In a frame read with ``format=F``, the ``-inf``
    values beyond ``zero_count`` are written into the bin just below its lowest int column
    and the ``+inf`` values beyond the infinities into the bin just above its highest one
    (clamped into the dtype's range), as for tandv frames.
    """
    df = _load(frame).reset_index(drop=True)
    tandv = _is_tandv(df)
    if tandv:
        _validate_tandv(df)
    else:
        validate(df)
    records = _frame_records(df, tandv)
    tensor_types = df[(META, "tensor_type")].map(lambda t: _TANDV_TO_OURS.get(t, t))
    module_types = _column_or(df, (META, "type"), None)
    runs = df[(META, "run")].to_numpy() if not tandv else np.full(len(df), ".")
    orders = df[(META, "order")].to_numpy() if not tandv else _first_seen(df, tensor_types)
    steps = df[(META, "step")].to_numpy()
    by_run: dict[str, list[int]] = defaultdict(list)
    for i, run in enumerate(runs):
        by_run[_check_run(run)].append(i)
    for run, indices in by_run.items():
        indices.sort(key=lambda i: (steps[i], orders[i]))
        with NumericsWriter(Path(logdir) / run if run != "." else Path(logdir)) as writer:
            for i in indices:
                writer.add_record(
                    df[(META, "name")].iloc[i],
                    records[i],
                    int(steps[i]),
                    tensor_types.iloc[i],
                    module_type=_module_type(module_types[i]),
                    order=int(orders[i]),
                )


def _check_run(run: str) -> str:
    path = os.path.normpath(run)
    if os.path.isabs(path) or path == ".." or path.startswith(".." + os.sep):
        raise _column_error((META, "run"), f"{run!r} is not a path inside the logdir")
    return path.replace(os.sep, "/")


def _first_seen(df: pd.DataFrame, tensor_types: pd.Series) -> np.ndarray:
    """Order of each row's tag by first appearance in the frame."""
    keys = list(zip(df[(META, "name")], tensor_types))
    order: dict[tuple, int] = {}
    for key in keys:
        order.setdefault(key, len(order))
    return np.array([order[key] for key in keys], dtype=np.int64)


def to_tandv(df: pd.DataFrame) -> pd.DataFrame:
    """The same rows with exactly tandv's columns (mapping in the module doc)."""
    validate(df)
    ints, _ = _exponent_columns(df)
    out = {}
    for column in TANDV_METADATA:
        values = df[(META, column)]
        if column == "tensor_type":
            values = values.map(lambda t: _OURS_TO_TANDV.get(t, t))
        out[(META, column)] = values.reset_index(drop=True)
    finite = (
        _column_or(df, (SCALAR, "numel"), np.nan)
        - _column_or(df, (SCALAR, "nan_count"), 0)
        - _column_or(df, (SCALAR, "posinf_count"), 0)
        - _column_or(df, (SCALAR, "neginf_count"), 0)
    ).astype(np.float64)
    for name in TANDV_STATISTICS:
        values = _column_or(df, (SCALAR, name), np.nan).astype(np.float64)
        if name == "std":
            with np.errstate(invalid="ignore", divide="ignore"):
                values = np.where(finite > 1, values * np.sqrt(finite / (finite - 1)), np.nan)
        out[(SCALAR, name)] = pd.Series(values, dtype=np.float64)
    counts = {
        label: np.zeros(len(df), dtype=np.int64) for label in (NEG_INF, *TANDV_EXPONENTS, POS_INF)
    }
    counts[NEG_INF] += df[(EXP, NEG_INF)].to_numpy(np.int64)
    counts[POS_INF] += df[(EXP, POS_INF)].to_numpy(np.int64)
    for n in ints:
        label = n - TANDV_BIN_SHIFT
        label = NEG_INF if label < TANDV_EXPONENTS[0] else label
        label = POS_INF if label != NEG_INF and label > TANDV_EXPONENTS[-1] else label
        counts[label] += df[(EXP, n)].to_numpy(np.int64)
    for label, values in counts.items():
        out[(EXP, label)] = pd.Series(values, dtype=np.int64)
    frame = pd.DataFrame(out)
    frame.columns = pd.MultiIndex.from_tuples(list(out))
    return frame
