"""One tracked tensor at one step as a TensorBoard ``Summary``, and back.

The value of each step is a 1-D ``DT_INT64`` ``TensorProto`` (``int64_val``: protobuf packs
it as varints, so small numbers take one or two bytes) laid out as::

    [dtype_code, numel, zero_count, nan_count, posinf_count, neginf_count,
     bins_lo + 1100, n_bins, *counts (n_bins of them),
     *(underflow, overflow) for each format, in the tag metadata's order,
     *the 9 statistics, in ``STATISTICS`` order]

- ``dtype_code`` is the index of the dtype's name in ``metadata.DTYPE_CODES``.
- ``counts[i]`` counts the finite non-zero values with ``floor(log2|x|) == bins_lo + i``;
  only the non-empty range of bins is stored (``n_bins == 0`` when there is none, and then
  ``bins_lo`` is 0). The offset 1100 keeps ``bins_lo`` positive (float64's lowest bin is
  -1074) so it stays a short varint.
- The statistics are stored as IEEE bit patterns: for float64 tensors the float64 pattern
  read as an int64; for every other dtype (whose statistics are accumulated in float32)
  the float32 pattern read as an uint32 (0 .. 2**32 - 1). NaN stays NaN.
"""

from __future__ import annotations

import numpy as np
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from tandv_tb import formats as fmt
from tandv_tb.metadata import DTYPE_CODES, TagInfo
from tandv_tb.stats.record import COUNTS, STATISTICS, NumericsRecord

BINS_OFFSET = 1100
_HEADER = len(COUNTS) + 3  # dtype_code, the counts, bins_lo + offset, n_bins


def dtype_code(dtype: str) -> int:
    """The stored code of a dtype name; ``ValueError`` for a dtype without one."""
    try:
        return DTYPE_CODES.index(dtype)
    except ValueError:
        raise ValueError(
            f"dtype {dtype!r} has no code in tandv_tb.metadata.DTYPE_CODES; "
            f"known dtypes: {', '.join(DTYPE_CODES)}"
        ) from None


def encode_record(record: NumericsRecord, formats: tuple[str, ...]) -> np.ndarray:
    """The int64 vector stored for one step (layout in the module docstring)."""
    if set(record.underflow) != set(formats) or set(record.overflow) != set(formats):
        raise ValueError(
            f"the record holds under/overflow counts for {sorted(record.underflow)}, "
            f"but the tag records the formats {list(formats)}"
        )
    counts = np.asarray(record.counts, dtype=np.int64).reshape(-1)
    if counts.size and counts.min() < 0:
        raise ValueError("histogram counts must be non-negative")
    casts = [count for f in formats for count in (record.underflow[f], record.overflow[f])]
    header = [
        dtype_code(record.dtype),
        *(getattr(record, name) for name in COUNTS),
        record.bins_lo + BINS_OFFSET if counts.size else BINS_OFFSET,
        counts.size,
    ]
    statistics = [record.statistics.get(name, np.nan) for name in STATISTICS]
    return np.concatenate(
        [
            np.asarray(header, dtype=np.int64),
            counts,
            np.asarray(casts, dtype=np.int64),
            _encode_statistics(statistics, record.dtype),
        ]
    )


def _encode_statistics(values: list[float], dtype: str) -> np.ndarray:
    if dtype == "float64":
        return np.asarray(values, dtype=np.float64).view(np.int64)
    with np.errstate(over="ignore"):
        as_float32 = np.asarray(values, dtype=np.float64).astype(np.float32)
    return as_float32.view(np.uint32).astype(np.int64)


def _decode_statistics(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float64":
        return values.astype(np.int64).view(np.float64)
    if values.size and (values.min() < 0 or values.max() > np.iinfo(np.uint32).max):
        raise ValueError("float32 statistics out of the uint32 range")
    with np.errstate(invalid="ignore"):  # signalling-NaN patterns stay NaN
        return values.astype(np.uint32).view(np.float32).astype(np.float64)


def tensor_proto(values: np.ndarray) -> tensor_pb2.TensorProto:
    """A 1-D ``DT_INT64`` ``TensorProto`` holding ``values``."""
    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_INT64,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=len(values))]
        ),
        int64_val=np.asarray(values, dtype=np.int64).tolist(),
    )


def numerics_summary(
    info: TagInfo, record: NumericsRecord, with_metadata: bool = True
) -> summary_pb2.Summary:
    """A ``Summary`` with one value: the encoded record, and the tag's metadata unless
    ``with_metadata`` is false (TensorBoard keeps a tag's first metadata only)."""
    value = summary_pb2.Summary.Value(
        tag=info.tag, tensor=tensor_proto(encode_record(record, info.formats))
    )
    if with_metadata:
        value.metadata.CopyFrom(info.to_metadata())
    return summary_pb2.Summary(value=[value])


def decode_tensor(array: np.ndarray, info: TagInfo) -> NumericsRecord:
    """The ``NumericsRecord`` of one stored step; ``ValueError`` if it is malformed."""
    values = np.asarray(array)
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(
            f"a numerics tensor must be a 1-D integer vector, got shape {values.shape} "
            f"and dtype {values.dtype}"
        )
    values = values.astype(np.int64)
    if len(values) < _HEADER:
        raise ValueError(f"a numerics tensor has at least {_HEADER} values, got {len(values)}")
    code, n_bins = int(values[0]), int(values[_HEADER - 1])
    if not 0 <= code < len(DTYPE_CODES):
        raise ValueError(f"unknown dtype code {code} (this tandv_tb knows {len(DTYPE_CODES)})")
    n_formats, n_stats = len(info.formats), len(STATISTICS)
    expected = _HEADER + max(n_bins, 0) + 2 * n_formats + n_stats
    if n_bins < 0 or len(values) != expected:
        raise ValueError(
            f"a numerics tensor with {n_bins} bins and {n_formats} formats has {expected} "
            f"values, got {len(values)}"
        )
    dtype = DTYPE_CODES[code]
    counts = values[_HEADER : _HEADER + n_bins].copy()
    casts = values[_HEADER + n_bins : _HEADER + n_bins + 2 * n_formats]
    statistics = _decode_statistics(values[len(values) - n_stats :], dtype)
    head = dict(zip(COUNTS, (int(v) for v in values[1 : len(COUNTS) + 1])))
    bins_lo = int(values[_HEADER - 2]) - BINS_OFFSET if n_bins else 0
    _check_consistent(head, counts, casts, dtype, bins_lo)
    return NumericsRecord(
        dtype=dtype,
        **head,
        bins_lo=bins_lo,
        counts=counts,
        statistics={name: float(v) for name, v in zip(STATISTICS, statistics)},
        underflow={f: int(casts[2 * i]) for i, f in enumerate(info.formats)},
        overflow={f: int(casts[2 * i + 1]) for i, f in enumerate(info.formats)},
    )


def _check_consistent(
    head: dict[str, int], counts: np.ndarray, casts: np.ndarray, dtype: str, bins_lo: int
) -> None:
    if min(head.values()) < 0 or (counts.size and counts.min() < 0) or (casts < 0).any():
        raise ValueError("a numerics tensor holds negative counts")
    total = head["zero_count"] + head["nan_count"] + head["posinf_count"]
    total += head["neginf_count"] + int(counts.sum())
    if total != head["numel"]:
        raise ValueError(f"a numerics tensor's counts add up to {total}, not numel {head['numel']}")
    info = fmt.info(dtype)
    if counts.size and (
        bins_lo < info.min_exponent or bins_lo + counts.size - 1 > info.max_exponent
    ):
        raise ValueError(
            f"a numerics tensor's bins {bins_lo}..{bins_lo + counts.size - 1} lie outside "
            f"{dtype}'s range {info.min_exponent}..{info.max_exponent}"
        )
