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
protobuf) and skipped. Which fields exist and their types come from the generated
descriptors (``_schema``); the field numbers this module reads are the ``F_*`` constants,
checked against the descriptors by the tests. A not-ok event has no values in the result
(its ``step`` and ``wall_time`` are 0).

``intern_tags`` turns the tags' byte ranges into a list of distinct names and an index per
value, decoding each distinct tag once.
"""

from __future__ import annotations

import dataclasses
import functools

import numba
import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from tensorboard.compat.proto import event_pb2

# Field numbers read here (tests check them against the descriptors).
F_EVENT_WALL_TIME, F_EVENT_STEP, F_EVENT_SUMMARY = 1, 2, 5
F_SUMMARY_VALUE = 1
F_VALUE_TAG, F_VALUE_TENSOR, F_VALUE_METADATA = 1, 8, 9
F_TENSOR_DTYPE, F_TENSOR_SHAPE, F_TENSOR_CONTENT, F_TENSOR_INT64_VAL = 1, 2, 4, 10
F_SHAPE_DIM = 2
F_DIM_SIZE = 1

# How a field is encoded (the schema tables' codes).
K_UNKNOWN, K_VARINT, K_FIXED64, K_FIXED32, K_BYTES, K_STRING, K_MESSAGE, K_GROUP = range(8)
_KIND_OF_TYPE = {
    **dict.fromkeys(
        (
            FieldDescriptor.TYPE_INT32,
            FieldDescriptor.TYPE_INT64,
            FieldDescriptor.TYPE_UINT32,
            FieldDescriptor.TYPE_UINT64,
            FieldDescriptor.TYPE_SINT32,
            FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_BOOL,
            FieldDescriptor.TYPE_ENUM,
        ),
        K_VARINT,
    ),
    **dict.fromkeys(
        (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64),
        K_FIXED64,
    ),
    **dict.fromkeys(
        (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32),
        K_FIXED32,
    ),
    FieldDescriptor.TYPE_BYTES: K_BYTES,
    FieldDescriptor.TYPE_STRING: K_STRING,
    FieldDescriptor.TYPE_MESSAGE: K_MESSAGE,
    FieldDescriptor.TYPE_GROUP: K_GROUP,
}

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
    kinds, children, packable, oneofs = _schema()
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


def intern_tags(data: np.ndarray, scanned: ScannedValues) -> tuple[list[str], np.ndarray]:
    """``(names, index)``: the distinct tags in order of first appearance, and for each value
    the index of its tag in ``names`` (a run has a few thousand tags over millions of values,
    so each distinct byte string is decoded once). The scan has checked that every tag is
    valid UTF-8, so decoding is strict."""
    index, firsts = _intern(np.ascontiguousarray(data), scanned.tag_start, scanned.tag_len)
    names = [
        data[s : s + n].tobytes().decode("utf-8")
        for s, n in zip(scanned.tag_start[firsts].tolist(), scanned.tag_len[firsts].tolist())
    ]
    return names, index


@functools.cache
def _schema() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tables over (message type, field number) of every message reachable from ``Event``
    (type 0): the field's kind (K_*), its message type's index, whether it is a repeated
    scalar (which protobuf accepts packed or not), and its oneof (index + 1, 0 for none)."""
    types = [event_pb2.Event.DESCRIPTOR]
    index = {types[0].full_name: 0}
    for descriptor in types:  # grows while walked: breadth first over message fields
        for field in descriptor.fields:
            child = field.message_type
            if child is not None and child.full_name not in index:
                index[child.full_name] = len(types)
                types.append(child)
    width = 1 + max(field.number for d in types for field in d.fields)
    kinds = np.zeros((len(types), width), np.int8)
    children = np.zeros((len(types), width), np.int64)
    packable = np.zeros((len(types), width), np.bool_)
    oneofs = np.zeros((len(types), width), np.int64)
    for t, descriptor in enumerate(types):
        for field in descriptor.fields:
            kind = _KIND_OF_TYPE[field.type]
            kinds[t, field.number] = kind
            if field.message_type is not None:
                children[t, field.number] = index[field.message_type.full_name]
            packable[t, field.number] = field.is_repeated and kind in (
                K_VARINT,
                K_FIXED64,
                K_FIXED32,
            )
            if field.containing_oneof is not None:
                oneofs[t, field.number] = field.containing_oneof.index + 1
    return kinds, children, packable, oneofs


@numba.njit(cache=True, nogil=True)
def _varint(data, pos, limit, max_bytes):
    """(value, position after it); position -1 when it runs past ``limit``, is longer than
    ``max_bytes`` or does not fit in 64 bits."""
    value = np.uint64(0)
    for i in range(max_bytes):
        if pos >= limit:
            return np.uint64(0), -1
        byte = data[pos]
        pos += 1
        if i == 9 and byte > 1:
            return np.uint64(0), -1
        value |= np.uint64(byte & 0x7F) << np.uint64(7 * i)
        if byte < 0x80:
            return value, pos
    return np.uint64(0), -1


@numba.njit(cache=True, nogil=True)
def _valid_utf8(data, pos, end):
    """Whether ``data[pos:end]`` is well-formed UTF-8 (no overlong forms, surrogates or code
    points past U+10FFFF), as protobuf requires of string fields."""
    while pos < end:
        lead = data[pos]
        if lead < 0x80:
            pos += 1
            continue
        lo, hi = 0x80, 0xBF  # the range of the byte after the lead
        if 0xC2 <= lead <= 0xDF:
            more = 1
        elif lead == 0xE0:
            more, lo = 2, 0xA0
        elif lead == 0xED:
            more, hi = 2, 0x9F
        elif 0xE1 <= lead <= 0xEF:
            more = 2
        elif lead == 0xF0:
            more, lo = 3, 0x90
        elif lead == 0xF4:
            more, hi = 3, 0x8F
        elif 0xF1 <= lead <= 0xF3:
            more = 3
        else:
            return False
        if end - pos - 1 < more or not lo <= data[pos + 1] <= hi:
            return False
        for k in range(2, more + 1):
            if not 0x80 <= data[pos + k] <= 0xBF:
                return False
        pos += more + 1
    return True


@numba.njit(cache=True, nogil=True)
def _valid_packed(data, pos, end, kind):
    """Whether ``data[pos:end]`` is a packed run of varints, or of 8- or 4-byte values."""
    if kind == K_FIXED64:
        return (end - pos) % 8 == 0
    if kind == K_FIXED32:
        return (end - pos) % 4 == 0
    while pos < end:
        _, pos = _varint(data, pos, end, 10)
        if pos < 0:
            return False
    return True


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
            field, wire, body, pos = _next_field(data, pos, end)
            if pos < 0:
                break
            if field == F_EVENT_SUMMARY and wire == 2:
                inner = body
                while 0 <= inner < pos:
                    field, wire, _, inner = _next_field(data, inner, pos)
                    count += field == F_SUMMARY_VALUE and wire == 2 and inner >= 0
    return count


@numba.njit(cache=True, nogil=True)
def _next_field(data, pos, limit):
    """(field number, wire type, start of a length-delimited field's bytes, position after
    the field) of the field at ``pos``; the position is -1 where it is not well formed."""
    key, pos = _varint(data, pos, limit, 5)
    field, wire, body = np.int64(key >> np.uint64(3)), np.int64(key & np.uint64(7)), pos
    if pos < 0:
        return field, wire, body, -1
    if wire == 0:
        _, pos = _varint(data, pos, limit, 10)
    elif wire == 1 or wire == 5:
        pos = pos + (8 if wire == 1 else 4) if limit - pos >= (8 if wire == 1 else 4) else -1
    elif wire == 2:
        size, body = _varint(data, pos, limit, 5)
        if body < 0 or size >= 0x7FFFFFFF or np.int64(size) > limit - body:
            return field, wire, body, -1
        pos = body + np.int64(size)
    else:
        pos = -1
    return field, wire, body, pos


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
        tag, pos = _varint(data, pos, limit, 5)
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
            number, pos = _varint(data, pos, limit, 10)
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
            size, pos = _varint(data, pos, limit, 5)
            if pos < 0 or size >= 0x7FFFFFFF or np.int64(size) > limit - pos:
                return fail
            body, length = pos, np.int64(size)
            pos += length
            if kind == K_STRING:
                if not _valid_utf8(data, body, pos):
                    return fail
            elif kind in (K_VARINT, K_FIXED64, K_FIXED32):
                if not packable[mtype, field] or not _valid_packed(data, body, pos, kind):
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


@numba.njit(cache=True, nogil=True)
def _intern(data, starts, lengths):
    """(index of each string's distinct value, position of each distinct value's first
    occurrence), over the byte strings ``data[starts[i]:starts[i] + lengths[i]]``: an
    open-addressing hash table that compares bytes, so equal means equal."""
    n = len(starts)
    index = np.empty(n, np.int64)
    firsts = np.empty(n, np.int64)
    hashes = np.empty(n, np.uint64)
    successors = np.full(n, -1, np.int64)  # the value that last came after each one
    slots = np.full(1024, -1, np.int64)
    done = n_distinct = 0
    while True:  # the table is replaced only here, outside the hot loop
        done, n_distinct = _intern_into(
            data, starts, lengths, done, slots, index, firsts, hashes, successors, n_distinct
        )
        if done == n:
            return index, firsts[:n_distinct]
        slots = np.full(2 * len(slots), -1, np.int64)
        mask = np.uint64(len(slots) - 1)
        for d in range(n_distinct):
            j = hashes[d] & mask
            while slots[j] >= 0:
                j = (j + np.uint64(1)) & mask
            slots[j] = d


@numba.njit(cache=True, nogil=True)
def _intern_into(data, starts, lengths, i, slots, index, firsts, hashes, successors, n_distinct):
    """Strings from ``i`` on into the table until all are in or it is half full: (strings
    done, distinct count). Writers repeat their tags in the same order at every step, so
    the value that followed the previous string last time is tried before hashing."""
    mask = np.uint64(len(slots) - 1)
    while i < len(starts) and 2 * n_distinct < len(slots):
        s, length = starts[i], lengths[i]
        before = index[i - 1] if i > 0 else -1
        guess = successors[before] if before >= 0 else -1
        if guess >= 0 and _same(data, starts[firsts[guess]], lengths[firsts[guess]], s, length):
            index[i] = guess
        else:
            h = _hash(data, s, s + length)
            j = h & mask
            while True:
                d = slots[j]
                if d < 0:
                    slots[j] = n_distinct
                    firsts[n_distinct], hashes[n_distinct] = i, h
                    index[i] = n_distinct
                    n_distinct += 1
                    break
                if hashes[d] == h and _same(data, starts[firsts[d]], lengths[firsts[d]], s, length):
                    index[i] = d
                    break
                j = (j + np.uint64(1)) & mask
        if before >= 0:
            successors[before] = index[i]
        i += 1
    return i, n_distinct


@numba.njit(cache=True, nogil=True)
def _hash(data, pos, end):
    """A 64-bit hash of ``data[pos:end]``, 8 bytes (a multiply) at a time."""
    h = np.uint64(end - pos) * np.uint64(0x9E3779B97F4A7C15)
    while pos < end:
        word = np.uint64(0)
        for k in range(min(8, end - pos)):
            word |= np.uint64(data[pos + k]) << np.uint64(8 * k)
        h = (h ^ word) * np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(29)
        pos += 8
    return h ^ (h >> np.uint64(32))


@numba.njit(cache=True, nogil=True)
def _same(data, a, a_len, b, b_len):
    if a_len != b_len:
        return False
    for k in range(a_len):  # noqa: SIM110 (a loop compiles to a loop in numba)
        if data[a + k] != data[b + k]:
            return False
    return True
