"""Helpers for the event-file format tests: records, event files and tandv-style frames."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tandv_tb.event_files.record import STATISTICS, NumericsRecord
from tandv_tb.event_files.summary import encode_varints
from tandv_tb.formats import canonical_name
from tests.helpers.reference import reference


def tensor_proto(values: np.ndarray) -> tensor_pb2.TensorProto:
    """The stored ``TensorProto`` (version 2) of an int64 vector: ``DT_UINT8`` varint bytes,
    for tests that write damaged or hand-made records."""
    content = encode_varints(np.asarray(values, dtype=np.int64))
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_UINT8, tensor_content=content)
    proto.tensor_shape.dim.add(size=len(content))
    return proto


def record_of(values: np.ndarray, formats: tuple[str, ...] = ()) -> NumericsRecord:
    """The contract's record of ``values``, from the independent numpy reference."""
    ref = reference(np.asarray(values), formats)
    bins = ref["bins"]
    lo = min(bins) if bins else 0
    counts = np.zeros(max(bins) - lo + 1 if bins else 0, dtype=np.int64)
    for n, c in bins.items():
        counts[n - lo] = c
    return NumericsRecord(
        dtype=canonical_name(np.asarray(values).dtype),
        numel=ref["numel"],
        zero_count=ref["zero_count"],
        nan_count=ref["nan_count"],
        posinf_count=ref["posinf_count"],
        neginf_count=ref["neginf_count"],
        bins_lo=lo,
        counts=counts,
        statistics={k: float(ref["statistics"][k]) for k in STATISTICS},
        underflow=dict(ref["underflow"]),
        overflow=dict(ref["overflow"]),
    )


def stored(record: NumericsRecord) -> NumericsRecord:
    """``record`` as read back: statistics rounded to float32 unless the dtype is float64."""
    if record.dtype == "float64":
        return record
    rounded = {k: float(np.float32(v)) for k, v in record.statistics.items()}
    return dataclasses.replace(record, statistics=rounded)


def event_files(logdir: Path) -> list[Path]:
    return sorted(p for p in Path(logdir).rglob("*") if "tfevents" in p.name)


def write_raw_events(logdir: Path, values: list[tuple[int, summary_pb2.Summary.Value]]) -> Path:
    """An event file holding the given (step, Summary.Value) pairs, one event each."""
    writer = EventFileWriter(str(logdir))
    for step, value in values:
        writer.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    return event_files(logdir)[-1]


def tandv_stash(values: np.ndarray) -> tuple[dict[float, int], dict[str, float]]:
    """What tandv's default stash function computes for a float32 tensor: frexp exponents
    clamped into -16..16 (beyond: -inf/inf), and its 8 statistics (std is the sample one)."""
    x = np.asarray(values, dtype=np.float32).reshape(-1)
    exponents = np.clip(np.frexp(x)[1], -17, 17)
    hist = {e: int(np.sum(exponents == e)) for e in range(-17, 18)}
    hist[-math.inf], hist[math.inf] = hist.pop(-17), hist.pop(17)
    x64 = x.astype(np.float64)
    rm2 = np.sqrt(np.mean(x64**2))
    stats = {
        "mean": x64.mean(),
        "std": x64.std(ddof=1),
        "mean_abs": np.abs(x64).mean(),
        "max_abs": np.abs(x64).max(),
        "min_abs": np.abs(x64).min(),
        "rm2": rm2,
        "rm4": np.mean(x64**4) ** 0.25,
        "rm8": np.mean(x64**8) ** 0.125,
    }
    return hist, {k: float(np.float32(v)) for k, v in stats.items()}


def tandv_frame(rows: list[dict]) -> pd.DataFrame:
    """A logframe laid out exactly as tandv builds one: ``rows`` hold step, name, type,
    tensor_type, dtype and the tensor ``values``."""
    data: dict[tuple, list] = {}
    for row in rows:
        hist, stats = tandv_stash(row["values"])
        cells = {("metadata", k): row[k] for k in ("step", "name", "type", "tensor_type")}
        cells[("metadata", "dtype")] = row.get("dtype", "float32")
        cells.update({("scalar_stats", k): v for k, v in stats.items()})
        for label in (-math.inf, *range(-16, 17), math.inf):
            cells[("exponent_counts", label)] = hist[label]
        for key, value in cells.items():
            data.setdefault(key, []).append(value)
    frame = pd.DataFrame(data)
    frame.columns = pd.MultiIndex.from_tuples(list(data))
    return frame


def check_tandv_schema(df: pd.DataFrame) -> None:
    """tandv's validator rules (``tandv/track/common/_utils.py``), restated: exactly its
    5 metadata columns with their dtypes, >= 1 numeric scalar stat, int exponent counts
    with -inf and inf."""
    assert isinstance(df.columns, pd.MultiIndex)
    meta = set(df["metadata"].columns)
    assert meta == {"name", "type", "tensor_type", "step", "dtype"}, meta
    for column in ("name", "type", "tensor_type", "dtype"):
        assert pd.api.types.is_string_dtype(df[("metadata", column)].dtype), column
    assert pd.api.types.is_integer_dtype(df[("metadata", "step")])
    assert len(df["scalar_stats"].columns) >= 1
    for column in df["scalar_stats"].columns:
        assert pd.api.types.is_float_dtype(df[("scalar_stats", column)])
    labels = list(df["exponent_counts"].columns)
    assert -math.inf in labels and math.inf in labels
    assert any(not (isinstance(x, float) and math.isinf(x)) for x in labels)
    for label in labels:
        assert pd.api.types.is_integer_dtype(df[("exponent_counts", label)]), label
    assert set(df.columns.get_level_values(0)) == {"metadata", "scalar_stats", "exponent_counts"}
