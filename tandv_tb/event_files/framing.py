"""How records are framed in a TensorBoard event file, for the writer and the reader.

A record is ``uint64 length``, ``uint32 masked crc32c(length)``, ``data`` (a serialized
``Event``), ``uint32 masked crc32c(data)``. ``frame`` makes one; ``frames`` finds them in
bytes read from a file, and where bytes hold no valid record (``Damage``).
"""

from __future__ import annotations

import dataclasses
import re
import struct

import google_crc32c

LENGTH, CRC = struct.Struct("<Q"), struct.Struct("<I")
#: Bytes before a record's data (its length and that length's checksum), and after it.
HEADER_BYTES, FOOTER_BYTES = LENGTH.size + CRC.size, CRC.size
_NONZERO = re.compile(rb"[^\x00]")


def masked_crc32c(data: bytes) -> int:
    """TensorFlow's masked CRC-32C of ``data``: the CRC rotated right by 15 bits plus a
    constant, so that a CRC of bytes that themselves hold CRCs stays well mixed."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record of an event file holding ``data`` (a serialized ``Event``)."""
    length = LENGTH.pack(len(data))
    return b"".join((length, CRC.pack(masked_crc32c(length)), data, CRC.pack(masked_crc32c(data))))


@dataclasses.dataclass
class Damage:
    """Bytes ``start:end`` of a file hold no readable record."""

    start: int
    end: int
    reason: str


def _crc_at(data, offset: int) -> int:
    return CRC.unpack_from(data, offset)[0]


def _header_ok(data, offset: int) -> bool:
    return masked_crc32c(data[offset : offset + LENGTH.size]) == _crc_at(data, offset + LENGTH.size)


def _end_of(data, offset: int) -> int:
    """Where the record whose (valid) header starts at ``offset`` ends."""
    return offset + HEADER_BYTES + LENGTH.unpack_from(data, offset)[0] + FOOTER_BYTES


def _data_ok(data, offset: int, end: int) -> bool:
    body = data[offset + HEADER_BYTES : end - FOOTER_BYTES]
    return masked_crc32c(body) == _crc_at(data, end - FOOTER_BYTES)


def record_end(data, offset: int) -> int | None:
    """The end of the whole, checksum-valid record starting at ``offset``, else None."""
    if len(data) - offset < HEADER_BYTES + FOOTER_BYTES or not _header_ok(data, offset):
        return None
    end = _end_of(data, offset)
    if end > len(data) or not _data_ok(data, offset, end):
        return None
    return end


def _next_record(data, offset: int) -> int | None:
    """The first offset from ``offset`` on where a whole valid record starts, else None."""
    while offset < len(data) - HEADER_BYTES - FOOTER_BYTES + 1:
        if data[offset : offset + HEADER_BYTES] == bytes(HEADER_BYTES):  # never a valid header
            found = _NONZERO.search(data, offset)
            if found is None:
                break
            offset = max(offset + 1, found.start() - HEADER_BYTES + 1)
            continue
        if record_end(data, offset) is not None:
            return offset
        offset += 1
    return None


def frames(data, final: bool, start: int = 0):
    """``(start, end)`` of the data of every valid record from ``start`` on, and a
    ``Damage`` for each gap; finally the offset up to which ``data`` was consumed."""
    offset, size = start, len(data)
    while offset < size:
        if size - offset < HEADER_BYTES:
            break
        if not _header_ok(data, offset):
            resume = _next_record(data, offset + 1)
            if resume is None:  # maybe a record that is still being written
                break
            yield Damage(offset, resume, "damaged: a record header fails its checksum")
            offset = resume
            continue
        end = _end_of(data, offset)
        if end > size:
            break
        if not _data_ok(data, offset, end):
            yield Damage(offset, end, "damaged: a record's data fails its checksum")
        else:
            yield (offset + HEADER_BYTES, end - FOOTER_BYTES)
        offset = end
    if final and offset < size:
        if size - offset < HEADER_BYTES:
            reason = "the last record is truncated (in its header)"
        elif not _header_ok(data, offset):
            reason = "damaged: a record header fails its checksum"
        else:
            reason = "the last record is truncated (as after a crash)"
        yield Damage(offset, size, reason)
        offset = size
    yield offset


def first_record_size(data: bytes) -> int:
    """The size of the record starting ``data`` as its header says, if that header is whole
    and valid (else 0: it is damage, found by the framing); more than ``len(data)`` where
    the record goes on past the piece read."""
    if len(data) < HEADER_BYTES or not _header_ok(data, 0):
        return 0
    return _end_of(data, 0)
