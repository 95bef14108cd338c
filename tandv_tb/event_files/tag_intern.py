"""Tags of scanned summary values as names: each distinct tag decoded once.

A run has a few thousand tags over millions of values; ``intern_tags`` turns the tags' byte
ranges (``event_scan.ScannedValues``) into the list of distinct names and an index per
value, with a compiled hash table that compares bytes.
"""

from __future__ import annotations

import numba
import numpy as np

from tandv_tb.event_files.event_scan import ScannedValues


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
