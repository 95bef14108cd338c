"""The protobuf wire format of ``tensorboard.Event``, as ``event_scan`` reads it in
compiled code: the field numbers it reads (``F_*``, checked against the generated
descriptors by the tests), the schema tables of every message reachable from ``Event``
(``schema``: which fields exist, how each is encoded), and the primitives (varints, one
field, UTF-8 and packed runs checked as strictly as protobuf does).
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from tensorboard.compat.proto import event_pb2

# Field numbers ``event_scan`` reads (tests check them against the descriptors).
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


@functools.cache
def schema() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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
def varint(data, pos, limit, max_bytes):
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
def valid_utf8(data, pos, end):
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
def valid_packed(data, pos, end, kind):
    """Whether ``data[pos:end]`` is a packed run of varints, or of 8- or 4-byte values."""
    if kind == K_FIXED64:
        return (end - pos) % 8 == 0
    if kind == K_FIXED32:
        return (end - pos) % 4 == 0
    while pos < end:
        _, pos = varint(data, pos, end, 10)
        if pos < 0:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def next_field(data, pos, limit):
    """(field number, wire type, start of a length-delimited field's bytes, position after
    the field) of the field at ``pos``; the position is -1 where it is not well formed."""
    key, pos = varint(data, pos, limit, 5)
    field, wire, body = np.int64(key >> np.uint64(3)), np.int64(key & np.uint64(7)), pos
    if pos < 0:
        return field, wire, body, -1
    if wire == 0:
        _, pos = varint(data, pos, limit, 10)
    elif wire == 1 or wire == 5:
        pos = pos + (8 if wire == 1 else 4) if limit - pos >= (8 if wire == 1 else 4) else -1
    elif wire == 2:
        size, body = varint(data, pos, limit, 5)
        if body < 0 or size >= 0x7FFFFFFF or np.int64(size) > limit - body:
            return field, wire, body, -1
        pos = body + np.int64(size)
    else:
        pos = -1
    return field, wire, body, pos
