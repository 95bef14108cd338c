"""The numpy loops for small inputs (``tandv_tb.event_files.small_loops``) give what the compiled
loops (``tandv_tb.event_files.numba_loops``) give, and the callers pick them by size."""

from __future__ import annotations

import numpy as np
import pytest

from tandv_tb.event_files import numba_loops, small_loops
from tandv_tb.event_files.summary import decode_varint_parts, encode_varints

EDGES = np.array([0, 1, -1, 127, 128, 2**63 - 1, -(2**63), 2**35, -(2**35)], dtype=np.int64)


def _values(seed: int, n: int) -> np.ndarray:
    """Values of every varint length, 1 to 10 bytes."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 64, n)
    values = rng.integers(0, 2**62, n, dtype=np.int64) >> (62 - np.minimum(bits, 62))
    values[rng.random(n) < 0.2] *= -1
    return np.concatenate((EDGES, values))


def _parts(values: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The values' varints cut into parts of whole varints (some parts empty)."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, len(values) + 1, 40))
    pieces = np.split(values, cuts)
    encoded = [encode_varints(p) for p in pieces]
    data = np.frombuffer(b"".join(encoded), np.uint8)
    return data, np.array([len(e) for e in encoded], dtype=np.int64)


@pytest.mark.parametrize("seed", range(5))
def test_unleb128_equals_the_compiled_loop(seed):
    data, sizes = _parts(_values(seed, 3000), seed)
    expected_values, expected_counts, status = numba_loops.unleb128(data, sizes)
    assert status == 0
    values, counts = small_loops.unleb128(data, sizes)
    assert values.dtype == expected_values.dtype and np.array_equal(values, expected_values)
    assert np.array_equal(counts, expected_counts)


def test_unleb128_ignores_bytes_after_the_parts():
    data, sizes = _parts(_values(7, 100), 7)
    padded = np.concatenate((data, np.full(5, 0x80, np.uint8)))
    values, counts = small_loops.unleb128(padded, sizes)
    assert np.array_equal(values, numba_loops.unleb128(data, sizes)[0])
    assert np.array_equal(counts, numba_loops.unleb128(data, sizes)[1])


def test_no_parts_and_empty_parts():
    for sizes in (np.zeros(0, np.int64), np.zeros(3, np.int64)):
        values, counts = small_loops.unleb128(np.zeros(0, np.uint8), sizes)
        assert len(values) == 0 and np.array_equal(counts, np.zeros(len(sizes)))


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([b"\x01\x81", b"\x01"], "cut off"),  # the first part's last varint runs on
        ([b"\x01", b"\x81"], "cut off"),
        ([b"\x80" * 10 + b"\x01"], "longer than 10 bytes"),
        ([b"\x80" * 10], "cut off"),  # cut before it is too long: the compiled loop's order
    ],
)
def test_malformed_input_is_refused_as_before(parts, message):
    data = np.frombuffer(b"".join(parts), np.uint8)
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    assert small_loops.unleb128(data, sizes) is None
    with pytest.raises(ValueError, match=message):
        decode_varint_parts(data, sizes)


def test_large_input_takes_the_compiled_loop_with_the_same_result():
    values = np.resize(_values(3, 1000), 1_000_000)
    data, sizes = _parts(values, 3)
    assert sizes.sum() > small_loops.SMALL_BYTES
    decoded, counts = decode_varint_parts(data, sizes)
    assert np.array_equal(decoded, values) and counts.sum() == len(values)
    small, _ = decode_varint_parts(data[: sizes[0]], sizes[:1])
    assert np.array_equal(small, values[: len(small)])
