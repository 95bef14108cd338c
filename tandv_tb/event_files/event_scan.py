"""Summary values out of serialized ``Event`` protos, in compiled code, without protobuf.

Parsing every ``Event`` with protobuf and reading each value's tag and tensor in Python
costs a few microseconds a value: seconds for a run of millions of values. ``scan_events``
walks the protobuf wire format of ``tensorboard.Event`` in numba instead and returns, per
summary value, byte ranges into the file's bytes (tag, metadata, ``tensor_content``, packed
``int64_val``) and the tensor's dtype and shape, as numpy arrays.

It is exact or it declines: an event is ``ok`` only when protobuf would parse it and every
field returned equals protobuf's. Anything it does not fully model marks the event not ok,
and the caller parses that event with protobuf. Not ok are:

- malformed wire format, and some oddities protobuf tolerates: truncated varints or fields,
  lengths past the end of their message, wire types 3, 4, 6 and 7 (groups are not used by
  these messages), field number 0, a known field with another wire type than its declared
  type's (protobuf would keep it as an unknown field), invalid UTF-8 in any string field,
  nesting deeper than ``_MAX_DEPTH``, keys over 5 bytes, varints over 64 bits;
- what protobuf parses but these ranges cannot describe: an unpacked ``int64_val`` (every
  writer packs it) or more than one packed run of it, a value's ``metadata`` or ``tensor``
  field occurring twice (protobuf merges the occurrences), a value holding ``tensor`` and
  another member of its ``value`` oneof, an event holding ``summary`` and another member of
  its ``what`` oneof (protobuf keeps the last member only).

Repeated occurrences that the ranges can describe follow protobuf: the last ``step``,
``wall_time``, tag, dtype and ``tensor_content`` win; several ``summary`` fields, shapes and
dims add up. Every other field, known or not, is validated (at least as strictly as
protobuf) and skipped. Which fields exist, how each is encoded, and the field numbers read
here come from ``event_wire``. A not-ok event has no values in the result
(its ``step`` and ``wall_time`` are 0).
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from tandv_tb.event_files.event_wire import (
    F_DIM_SIZE,
    F_EVENT_STEP,
    F_EVENT_SUMMARY,
    F_EVENT_WALL_TIME,
    F_SHAPE_DIM,
    F_SUMMARY_VALUE,
    F_TENSOR_CONTENT,
    F_TENSOR_DTYPE,
    F_TENSOR_INT64_VAL,
    F_TENSOR_SHAPE,
    F_VALUE_METADATA,
    F_VALUE_TAG,
    F_VALUE_TENSOR,
    K_FIXED32,
    K_FIXED64,
    K_GROUP,
    K_MESSAGE,
    K_STRING,
    K_UNKNOWN,
    K_VARINT,
    next_field,
    schema,
    valid_packed,
    valid_utf8,
    varint,
)

# The messages on the way to the values, each the child of the one before through the field
# in _PATH_FIELD; every other message is validated and skipped (_ROLE_OTHER).
(_ROLE_EVENT, _ROLE_SUMMARY, _ROLE_VALUE, _ROLE_TENSOR, _ROLE_SHAPE, _ROLE_DIM) = range(6)
_ROLE_OTHER = 6
_PATH_FIELD = (F_EVENT_SUMMARY, F_SUMMARY_VALUE, F_VALUE_TENSOR, F_TENSOR_SHAPE, F_SHAPE_DIM)
_MAX_DEPTH = 32  # protobuf allows 100; deeper nesting is only in exotic tensors

# Rows of the per-value table.
(
    _EVENT,
    _TAG_START,
    _TAG_LEN,
    _META_START,
    _META_LEN,
    _DTYPE,
    _N_DIMS,
    _DIM0,
    _CONTENT_START,
    _CONTENT_LEN,
    _INT64_START,
    _INT64_LEN,
    _HAS_TENSOR,
) = range(13)
_N_ROWS = 13

# How the scan of one event ended.
_FAILED, _OK, _FULL = range(3)


@dataclasses.dataclass(frozen=True)
class ScannedValues:
    """What ``scan_events`` found. Per event (E): ``step``, ``wall_time``, ``ok``. Per summary
    value of the ok events (V, in file order): the rest; offsets are absolute in ``data``.

    A start of -1 (with length 0) means the field is absent; a present empty field has its
    own offset and length 0. ``dtype`` is 0 and ``n_dims`` 0 when absent, as in protobuf;
    ``dim0`` is the first dimension's size, -1 without dimensions. ``int64_*`` is the byte
    range of the packed ``int64_val`` varints.
    """

    step: np.ndarray
    wall_time: np.ndarray
    ok: np.ndarray
    event: np.ndarray
    tag_start: np.ndarray
    tag_len: np.ndarray
    meta_start: np.ndarray
    meta_len: np.ndarray
    dtype: np.ndarray
    n_dims: np.ndarray
    dim0: np.ndarray
    content_start: np.ndarray
    content_len: np.ndarray
    int64_start: np.ndarray
    int64_len: np.ndarray
    has_tensor: np.ndarray


def scan_events(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> ScannedValues:
    """The summary values of the serialized events ``data[starts[i]:ends[i]]`` (framing
    removed, checksums checked). Never reads outside ``data``, whatever the bytes and ranges."""
    data = np.ascontiguousarray(data)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise ValueError(f"data must be a 1-D uint8 array, not {data.dtype} of {data.ndim}-D")
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    if starts.shape != ends.shape or starts.ndim != 1:
        raise ValueError(f"starts {starts.shape} and ends {ends.shape} must be equal 1-D shapes")
    kinds, children, packable, oneofs = schema()
    capacity = _count_values(data, starts, ends)
    step, wall_bits, ok, values, n_values = _scan(
        data, starts, ends, capacity, kinds, children, packable, oneofs
    )
    rows = values[:, :n_values]
    return ScannedValues(
        step=step,
        wall_time=wall_bits.view(np.float64),
        ok=ok,
        event=rows[_EVENT],
        tag_start=rows[_TAG_START],
        tag_len=rows[_TAG_LEN],
        meta_start=rows[_META_START],
        meta_len=rows[_META_LEN],
        dtype=rows[_DTYPE],
        n_dims=rows[_N_DIMS],
        dim0=rows[_DIM0],
        content_start=rows[_CONTENT_START],
        content_len=rows[_CONTENT_LEN],
        int64_start=rows[_INT64_START],
        int64_len=rows[_INT64_LEN],
        has_tensor=rows[_HAS_TENSOR].astype(bool),
    )


@numba.njit(cache=True, nogil=True)
def _scan(data, starts, ends, capacity, kinds, children, packable, oneofs):
    """scan_events' arrays (the per-value ones as rows of one table, of ``capacity``
    columns to start with)."""
    n_events = len(starts)
    step = np.zeros(n_events, np.int64)
    wall_bits = np.zeros(n_events, np.uint64)
    ok = np.zeros(n_events, np.bool_)
    values = np.empty((_N_ROWS, max(capacity, 16)), np.int64)
    n_values = 0
    stack = np.empty((3, _MAX_DEPTH), np.int64)  # end, message type, role
    for e in range(n_events):
        start, end = starts[e], ends[e]
        if not 0 <= start <= end <= len(data):
            continue
        while True:
            status, n_after, step[e], wall_bits[e] = _scan_event(
                data, start, end, e, kinds, children, packable, oneofs, values, n_values, stack
            )
            if status != _FULL:
                break
            # (_count_values gives room enough, but a table too small must not be overrun.)
            # Grown here, and the event scanned again, so that the array is not reassigned
            # in the hot loop (which would make numba refcount it at every step).
            grown = np.empty((_N_ROWS, 2 * values.shape[1]), np.int64)
            for row in range(_N_ROWS):
                grown[row, :n_values] = values[row, :n_values]
            values = grown
        ok[e] = status == _OK
        if ok[e]:
            n_values = n_after
        else:
            step[e], wall_bits[e] = 0, 0
    return step, wall_bits, ok, values, n_values


@numba.njit(cache=True, nogil=True)
def _count_values(data, starts, ends):
    """How many ``Summary.value`` fields the events hold, from the keys of the events' and
    summaries' fields only: the size of the value table, which is then filled without
    growing it (growing a table of millions of values doubles the scan's time)."""
    count = 0
    for e in range(len(starts)):
        pos, end = starts[e], ends[e]
        if not 0 <= pos <= end <= len(data):
            continue
        while pos < end:
            field, wire, body, pos = next_field(data, pos, end)
            if pos < 0:
                break
            if field == F_EVENT_SUMMARY and wire == 2:
                inner = body
                while 0 <= inner < pos:
                    field, wire, _, inner = next_field(data, inner, pos)
                    count += field == F_SUMMARY_VALUE and wire == 2 and inner >= 0
    return count


@numba.njit(cache=True, nogil=True)
def _scan_event(data, start, end, event, kinds, children, packable, oneofs, values, n, stack):
    """(_OK, _FAILED or _FULL, value count, step, wall_time bits) after the event
    ``data[start:end]``, whose values are written to ``values`` from column ``n``."""
    fail = (_FAILED, n, np.int64(0), np.uint64(0))
    step, wall_bits = np.int64(0), np.uint64(0)
    has_summary = has_other_what = False  # members of Event's oneof
    v = -1  # the current value's column in ``values``
    has_other_value = False  # a member of the current value's oneof other than tensor
    first_dim = False  # whether the current Dim is its tensor's first
    depth = 0
    stack[0, 0], stack[1, 0], stack[2, 0] = end, 0, _ROLE_EVENT
    pos = start
    while True:
        limit = stack[0, depth]
        if pos == limit:
            if depth == 0:
                return _OK, n, step, wall_bits
            depth -= 1
            continue
        mtype, role = stack[1, depth], stack[2, depth]
        tag, pos = varint(data, pos, limit, 5)
        if pos < 0 or tag > 0xFFFFFFFF:
            return fail
        field, wire = np.int64(tag >> np.uint64(3)), np.int64(tag & np.uint64(7))
        if field == 0:
            return fail
        known = field < kinds.shape[1]  # every table lookup below is of a known field
        kind = kinds[mtype, field] if known else K_UNKNOWN
        oneof = oneofs[mtype, field] if known else 0
        number = np.uint64(0)  # a varint's or fixed64's value
        body = length = np.int64(0)  # a length-delimited field's bytes
        if wire == 0:
            if kind != K_UNKNOWN and kind != K_VARINT:
                return fail
            number, pos = varint(data, pos, limit, 10)
            if pos < 0:
                return fail
        elif wire == 1 or wire == 5:
            width = 8 if wire == 1 else 4
            if kind != K_UNKNOWN and kind != (K_FIXED64 if wire == 1 else K_FIXED32):
                return fail
            if limit - pos < width:
                return fail
            for k in range(width):
                number |= np.uint64(data[pos + k]) << np.uint64(8 * k)
            pos += width
        elif wire == 2:
            size, pos = varint(data, pos, limit, 5)
            if pos < 0 or size >= 0x7FFFFFFF or np.int64(size) > limit - pos:
                return fail
            body, length = pos, np.int64(size)
            pos += length
            if kind == K_STRING:
                if not valid_utf8(data, body, pos):
                    return fail
            elif kind in (K_VARINT, K_FIXED64, K_FIXED32):
                if not packable[mtype, field] or not valid_packed(data, body, pos, kind):
                    return fail
            elif kind == K_GROUP:
                return fail
        else:
            return fail

        child_role = _ROLE_OTHER
        if role < _ROLE_OTHER - 1 and field == _PATH_FIELD[role]:
            child_role = role + 1
        if role == _ROLE_EVENT:
            if field == F_EVENT_WALL_TIME:
                wall_bits = number
            elif field == F_EVENT_STEP:
                step = np.int64(number)
            elif field == F_EVENT_SUMMARY:
                has_summary = True
            elif oneof != 0 and oneof == oneofs[mtype, F_EVENT_SUMMARY]:
                has_other_what = True
            if has_summary and has_other_what:
                return fail
        elif role == _ROLE_SUMMARY:
            if field == F_SUMMARY_VALUE:
                if n == values.shape[1]:
                    return _FULL, n, np.int64(0), np.uint64(0)
                v, n = n, n + 1
                for row in range(_N_ROWS):  # (a slice would refcount a view each time)
                    values[row, v] = 0
                values[_EVENT, v] = event
                for row in (_TAG_START, _META_START, _DIM0, _CONTENT_START, _INT64_START):
                    values[row, v] = -1
                has_other_value = False
        elif role == _ROLE_VALUE:
            if field == F_VALUE_TAG:
                values[_TAG_START, v], values[_TAG_LEN, v] = body, length
            elif field == F_VALUE_METADATA:
                if values[_META_START, v] >= 0:
                    return fail
                values[_META_START, v], values[_META_LEN, v] = body, length
            elif field == F_VALUE_TENSOR:
                if values[_HAS_TENSOR, v]:
                    return fail
                values[_HAS_TENSOR, v] = 1
            elif oneof != 0 and oneof == oneofs[mtype, F_VALUE_TENSOR]:
                has_other_value = True
            if has_other_value and values[_HAS_TENSOR, v]:
                return fail
        elif role == _ROLE_TENSOR:
            if field == F_TENSOR_DTYPE:  # an int32 enum: the low 32 bits, signed
                dtype = np.int64(number & np.uint64(0xFFFFFFFF))
                values[_DTYPE, v] = dtype - (1 << 32) if dtype >= 1 << 31 else dtype
            elif field == F_TENSOR_CONTENT:
                values[_CONTENT_START, v], values[_CONTENT_LEN, v] = body, length
            elif field == F_TENSOR_INT64_VAL:
                if wire != 2 or values[_INT64_START, v] >= 0:
                    return fail
                values[_INT64_START, v], values[_INT64_LEN, v] = body, length
        elif role == _ROLE_SHAPE:
            if field == F_SHAPE_DIM:
                values[_N_DIMS, v] += 1
                first_dim = values[_N_DIMS, v] == 1
                if first_dim:  # a Dim without a size field has size 0
                    values[_DIM0, v] = 0
        elif role == _ROLE_DIM and field == F_DIM_SIZE and first_dim:
            values[_DIM0, v] = np.int64(number)

        if kind == K_MESSAGE:
            if depth + 1 == _MAX_DEPTH:
                return fail
            depth += 1
            stack[0, depth], stack[1, depth] = pos, children[mtype, field]
            stack[2, depth] = child_role
            pos = body
