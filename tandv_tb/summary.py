"""One tracked tensor at one step as a TensorBoard ``Summary``, and back.

The value of each step is a vector of int64 (``encode_record``) laid out as::

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

How the vector is stored depends on the tag's plugin data version (``metadata``):

- version 2 (written now): a 1-D ``DT_UINT8`` ``TensorProto`` whose ``tensor_content`` is the
  vector as LEB128 varints (each value's 64-bit pattern, 7 bits a byte, low bits first, the
  high bit set on every byte but a value's last). Small numbers take one or two bytes, and
  TensorBoard's data server holds one byte string per step instead of a vector of int64,
  about a quarter less memory, and hands it back several times faster.
- version 1: a 1-D ``DT_INT64`` ``TensorProto`` with the vector in ``int64_val``.

``decode_tensor`` reads both, from the ndarray ``tensor_util.make_ndarray`` gives: uint8
(varint bytes) or any other integer dtype (the vector itself).
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


def encode_varints(values: np.ndarray) -> bytes:
    """The LEB128 varints of the 64-bit patterns of ``values`` (int64), concatenated.

    Protobuf's own encoder does the work: a packed ``uint64_val`` field serializes as its
    key (2 bytes), the payload's length as a varint, then exactly these varints."""
    bits = np.asarray(values, dtype=np.int64).view(np.uint64)
    packed = tensor_pb2.TensorProto(uint64_val=bits.tolist()).SerializeToString()
    if not packed:
        return b""
    start = 2
    while packed[start] & 0x80:
        start += 1
    return packed[start + 1 :]


def decode_varints(data: np.ndarray) -> np.ndarray:
    """The int64 values of concatenated LEB128 varints (uint8 array); ``ValueError`` if the
    last one is cut off or one is longer than 10 bytes."""
    data = np.asarray(data, dtype=np.uint8).reshape(-1)
    if data.size == 0:
        return np.zeros(0, dtype=np.int64)
    ends = data < 0x80
    if not ends[-1]:
        raise ValueError("a numerics tensor's last varint is cut off")
    starts = np.concatenate(([0], np.flatnonzero(ends)[:-1] + 1))
    owner = np.cumsum(ends) - ends
    shift = np.arange(data.size) - starts[owner]
    if shift.max() >= 10:
        raise ValueError("a numerics tensor holds a varint longer than 10 bytes")
    parts = (data & 0x7F).astype(np.uint64) << (7 * shift).astype(np.uint64)
    return np.bitwise_or.reduceat(parts, starts).view(np.int64)


def tensor_proto(values: np.ndarray) -> tensor_pb2.TensorProto:
    """The stored ``TensorProto`` (version 2) of an int64 vector: ``DT_UINT8`` varint bytes."""
    content = encode_varints(values)
    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_UINT8,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=len(content))]
        ),
        tensor_content=content,
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


def stored_vector(array: np.ndarray) -> np.ndarray:
    """The int64 vector of one stored step from its ndarray: varint bytes (uint8, version 2)
    decoded, any other integer vector (version 1) as is; ``ValueError`` otherwise."""
    values = np.asarray(array)
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(
            f"a numerics tensor must be a 1-D integer vector, got shape {values.shape} "
            f"and dtype {values.dtype}"
        )
    if values.dtype == np.uint8:
        return decode_varints(values)
    return values.astype(np.int64)


def decode_tensor(array: np.ndarray, info: TagInfo) -> NumericsRecord:
    """The ``NumericsRecord`` of one stored step (the ndarray of its ``TensorProto``, either
    version); ``ValueError`` if it is malformed."""
    values = stored_vector(array)
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
