"""The records of an event file's bytes found in compiled code (numba), for files of many
small events (one event per tensor: a million records take seconds of Python in
``framing.frames``, a fraction of a second here).

``whole_records`` walks the records from the start while each is whole and both its
checksums hold, and stops at the first that is not (damage, or a record still being
written): ``framing.frames`` reads on from there, so what damage is and how it is reported
stays defined in one place. The checksum is the CRC-32C of ``framing`` (computed here with
lookup tables, 8 bytes a step; the tests compare it with ``google_crc32c`` on random
bytes), masked the same way.
"""

from __future__ import annotations

import numba
import numpy as np

from tandv_tb.event_files.framing import FOOTER_BYTES, HEADER_BYTES


def _tables() -> np.ndarray:
    """The lookup tables of CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for
    slicing by 8: ``[0]`` the byte-wise table, ``[k]`` a byte followed by k zero bytes."""
    tables = np.zeros((8, 256), dtype=np.uint32)
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        tables[0, byte] = crc
    for k in range(1, 8):
        previous = tables[k - 1]
        tables[k] = (previous >> 8) ^ tables[0][previous & 0xFF]
    return tables


_TABLES = _tables()


@numba.njit(cache=True, nogil=True)
def _masked_crc(data, start, end, tables):
    """The masked CRC-32C of ``data[start:end]``, 8 bytes a step (slicing by 8: 4 times
    faster than a byte a step), the last bytes one by one."""
    crc = np.int64(0xFFFFFFFF)
    i = start
    while end - i >= 8:
        low = crc ^ (
            np.int64(data[i])
            | (np.int64(data[i + 1]) << 8)
            | (np.int64(data[i + 2]) << 16)
            | (np.int64(data[i + 3]) << 24)
        )
        crc = np.int64(
            tables[7, low & 0xFF]
            ^ tables[6, (low >> 8) & 0xFF]
            ^ tables[5, (low >> 16) & 0xFF]
            ^ tables[4, (low >> 24) & 0xFF]
            ^ tables[3, data[i + 4]]
            ^ tables[2, data[i + 5]]
            ^ tables[1, data[i + 6]]
            ^ tables[0, data[i + 7]]
        )
        i += 8
    while i < end:
        crc = np.int64(tables[0, (crc ^ data[i]) & 0xFF]) ^ (crc >> 8)
        i += 1
    crc = crc ^ 0xFFFFFFFF
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    return np.uint32((rotated + 0xA282EAD8) & 0xFFFFFFFF)


@numba.njit(cache=True, nogil=True)
def _stored_crc(data, at):
    return (
        np.uint32(data[at])
        | (np.uint32(data[at + 1]) << np.uint32(8))
        | (np.uint32(data[at + 2]) << np.uint32(16))
        | (np.uint32(data[at + 3]) << np.uint32(24))
    )


@numba.njit(cache=True, nogil=True)
def _walk(data, table, header, footer, starts, ends):
    size = len(data)
    offset = 0
    n = 0
    while size - offset >= header + footer:
        length = np.uint64(0)
        for i in range(8):
            length |= np.uint64(data[offset + i]) << np.uint64(8 * i)
        if _masked_crc(data, offset, offset + 8, table) != _stored_crc(data, offset + 8):
            break
        if length > np.uint64(size - offset - header - footer):
            break
        end = offset + header + np.int64(length) + footer
        if _masked_crc(data, offset + header, end - footer, table) != _stored_crc(data, end - 4):
            break
        if n == len(starts):
            break
        starts[n] = offset + header
        ends[n] = end - footer
        n += 1
        offset = end
    return n, offset


def whole_records(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(starts, ends, stop)``: the data ranges of the whole, valid records from the start
    of ``data`` (uint8), up to the first that is not one, which begins at ``stop``."""
    capacity = len(data) // (HEADER_BYTES + FOOTER_BYTES) + 1
    starts = np.empty(capacity, dtype=np.int64)
    ends = np.empty(capacity, dtype=np.int64)
    n, stop = _walk(data, _TABLES, HEADER_BYTES, FOOTER_BYTES, starts, ends)
    return starts[:n], ends[:n], int(stop)


def masked_crc32c(data: np.ndarray) -> int:
    """The masked CRC-32C of ``data`` (uint8), as ``framing.masked_crc32c`` (for tests)."""
    return int(_masked_crc(data, 0, len(data), _TABLES))
