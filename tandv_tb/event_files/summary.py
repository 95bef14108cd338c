"""One tracked tensor at one step as a TensorBoard ``Summary``, and back.

The value of each step is a vector of int64 (``encode_record``) laid out as::

    [dtype_code, numel, zero_count, nan_count, posinf_count, neginf_count,
     bins_lo + 1100, n_bins, *counts (n_bins of them),
     *(underflow, overflow) for each format, in the tag metadata's order,
     *the 9 statistics, in ``STATISTICS`` order,
     *only where the tag records block formats (version 3): their section]

The block formats' section is ``[n, *entry for each]`` with ``n`` the number of block
formats (those of the tag's ``block_formats``, in order) and each entry::

    [underflow, overflow, zero_blocks, clamped_low, clamped_high,
     scale_lo + SCALE_OFFSET, n_scales, *scales (n_scales of them),
     exponent + BINS_OFFSET, signal, error]

(``record.BlockCounts``; ``scales`` trimmed to its non-empty range, ``scale_lo`` 0 when
empty; ``signal`` and ``error`` as float64 bit patterns whatever the dtype).

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

``record_columns.decode_tensor`` reads both, from the ndarray ``tensor_util.make_ndarray``
gives: uint8 (varint bytes) or any other integer dtype (the vector itself).
"""

from __future__ import annotations

import math
import struct

import numpy as np
from tensorboard.compat.proto import summary_pb2, tensor_pb2, types_pb2

from tandv_tb.event_files import small_loops
from tandv_tb.event_files.metadata import DTYPE_CODES, TagInfo
from tandv_tb.event_files.record import COUNTS, STATISTICS, BlockCounts, NumericsRecord
from tandv_tb.formats.blocks import MX_SCALE_MIN

BINS_OFFSET = 1100
#: Values before the bins: dtype_code, the counts, bins_lo + BINS_OFFSET, n_bins.
HEADER = len(COUNTS) + 3
#: Keeps a block format's lowest scale exponent (at least E8M0's, -127) positive: 128.
SCALE_OFFSET = 1 - MX_SCALE_MIN
#: The counts at the start of a block format's entry, then scale_lo + SCALE_OFFSET and
#: n_scales; after the scales, ``BLOCK_SUMS``.
BLOCK_HEAD = ("underflow", "overflow", "zero_blocks", "clamped_low", "clamped_high")
BLOCK_SUMS = ("exponent", "signal", "error")


_CODE_OF = {name: code for code, name in enumerate(DTYPE_CODES)}
#: |x| from which a float64 rounds to Inf in float32 (its largest value plus half an ulp).
_FLOAT32_ROUNDS_TO_INF = 2.0**128 - 2.0**103


def dtype_code(dtype: str) -> int:
    """The stored code of a dtype name; ``ValueError`` for a dtype without one."""
    code = _CODE_OF.get(dtype)
    if code is None:
        raise ValueError(
            f"dtype {dtype!r} has no code in tandv_tb.event_files.metadata.DTYPE_CODES; "
            f"known dtypes: {', '.join(DTYPE_CODES)}"
        )
    return code


def encode_record(
    record: NumericsRecord, formats: tuple[str, ...], block_formats: tuple[str, ...] = ()
) -> np.ndarray:
    """The int64 vector stored for one step (layout in the module docstring)."""
    if set(record.blocks) != set(block_formats):
        raise ValueError(
            f"the record holds block formats {sorted(record.blocks)}, but the tag records "
            f"{list(block_formats)}"
        )
    underflow, overflow = record.underflow, record.overflow
    if not (len(underflow) == len(overflow) == len(formats)) or not all(
        f in underflow and f in overflow for f in formats
    ):
        raise ValueError(
            f"the record holds under/overflow counts for {sorted(underflow)}, "
            f"but the tag records the formats {list(formats)}"
        )
    counts = np.asarray(record.counts, dtype=np.int64).reshape(-1)
    n_bins = counts.size
    if n_bins and counts.min() < 0:
        raise ValueError("histogram counts must be non-negative")
    statistics = record.statistics
    out = np.empty(HEADER + n_bins + 2 * len(formats) + len(STATISTICS), dtype=np.int64)
    out[:HEADER] = (
        dtype_code(record.dtype),
        record.numel,
        record.zero_count,
        record.nan_count,
        record.posinf_count,
        record.neginf_count,
        record.bins_lo + BINS_OFFSET if n_bins else BINS_OFFSET,
        n_bins,
    )
    out[HEADER : HEADER + n_bins] = counts
    for k, f in enumerate(formats):
        out[HEADER + n_bins + 2 * k] = underflow[f]
        out[HEADER + n_bins + 2 * k + 1] = overflow[f]
    values = [statistics.get(name, math.nan) for name in STATISTICS]
    out[len(out) - len(STATISTICS) :] = _statistics_bits(values, record.dtype)
    if not block_formats:
        return out
    section = [len(block_formats)]
    for name in block_formats:
        section += _block_entry(record.blocks[name])
    return np.concatenate([out, np.array(section, dtype=np.int64)])


def _block_entry(block: BlockCounts) -> list[int]:
    block = block.trimmed()
    scales = np.asarray(block.scales, dtype=np.int64)
    if len(scales) and scales.min() < 0:
        raise ValueError("block scale counts must be non-negative")
    sums = struct.unpack("<2q", struct.pack("<2d", block.signal, block.error))
    return [
        *(int(getattr(block, name)) for name in BLOCK_HEAD),
        block.scale_lo + SCALE_OFFSET if len(scales) else SCALE_OFFSET,
        len(scales),
        *scales.tolist(),
        block.exponent + BINS_OFFSET,
        *sums,
    ]


_AS_FLOAT64, _AS_INT64 = (
    struct.Struct(f"<{len(STATISTICS)}d"),
    struct.Struct(f"<{len(STATISTICS)}q"),
)
_AS_FLOAT32, _AS_UINT32 = (
    struct.Struct(f"<{len(STATISTICS)}f"),
    struct.Struct(f"<{len(STATISTICS)}I"),
)


def _statistics_bits(values: list[float], dtype: str) -> tuple[int, ...]:
    """The statistics' float64 bit patterns (float64 tensors) or float32 ones (others),
    rounded to nearest; too big for float32 is Inf."""
    if dtype == "float64":
        return _AS_INT64.unpack(_AS_FLOAT64.pack(*values))
    try:
        return _AS_UINT32.unpack(_AS_FLOAT32.pack(*values))
    except OverflowError:  # struct refuses the finite values that round to Inf
        rounded = [
            math.copysign(math.inf, v) if abs(v) >= _FLOAT32_ROUNDS_TO_INF else v for v in values
        ]
        return _AS_UINT32.unpack(_AS_FLOAT32.pack(*rounded))


def encode_varints(values: np.ndarray) -> bytes:
    """The LEB128 varints of the 64-bit patterns of ``values`` (int64), concatenated."""
    from tandv_tb.event_files import numba_loops  # numba: loaded on first use

    return numba_loops.leb128(
        np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    ).tobytes()


def decode_varints(data: np.ndarray) -> np.ndarray:
    """The int64 values of concatenated LEB128 varints (uint8 array); ``ValueError`` if the
    last one is cut off or one is longer than 10 bytes."""
    data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    values, _ = decode_varint_parts(data, np.array([data.size], dtype=np.int64))
    return values


def decode_varint_parts(data: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The int64 values of consecutive parts of ``data`` (uint8), part i being the next
    ``sizes[i]`` bytes, each holding whole varints, and the number of values of each part;
    ``ValueError`` if a part's last varint is cut off or one is longer than 10 bytes."""
    if np.sum(sizes) <= small_loops.SMALL_BYTES:
        decoded = small_loops.unleb128(data, sizes)
        if decoded is not None:
            return decoded[0].view(np.int64), decoded[1]
    from tandv_tb.event_files import numba_loops  # numba: loaded on first use

    values, counts, status = numba_loops.unleb128(data, sizes)
    if status == 1:
        raise ValueError("a numerics tensor's last varint is cut off")
    if status == 2:
        raise ValueError("a numerics tensor holds a varint longer than 10 bytes")
    return values.view(np.int64), counts


def _store(values: np.ndarray, proto: tensor_pb2.TensorProto) -> None:
    content = encode_varints(values)
    proto.dtype = types_pb2.DT_UINT8
    proto.tensor_content = content
    proto.tensor_shape.dim.add(size=len(content))


def numerics_value(
    info: TagInfo, record: NumericsRecord, with_metadata: bool = True
) -> summary_pb2.Summary.Value:
    """A ``Summary.Value``: the encoded record, and the tag's metadata unless
    ``with_metadata`` is false (TensorBoard keeps a tag's first metadata only)."""
    value = summary_pb2.Summary.Value(tag=info.tag)
    _store(encode_record(record, info.formats, info.block_formats), value.tensor)
    if with_metadata:
        value.metadata.CopyFrom(info.to_metadata())
    return value


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
