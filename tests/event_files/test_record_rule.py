"""The rule for stored vectors, as ``record_columns``' docstring states it, written here again
independently, against both decoders of ``decode_rows`` (numpy for small inputs, the
compiled pass for large ones) and ``decode_vector``'s reasons: random valid records of every
dtype, 0..many bins and 0..3 formats, and damaged ones of every kind."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tandv_tb.event_files import metadata, small_loops
from tandv_tb.event_files.record_columns import decode_rows, decode_vector
from tandv_tb.event_files.summary import BINS_OFFSET

CODES = metadata.DTYPE_CODES
N_STATS = 9
HEADER = 8  # dtype_code, numel, zero, nan, posinf, neginf, bins_lo + BINS_OFFSET, n_bins
#: A distinctive part of ``decode_vector``'s sentence for each reason.
SAYS = {
    "short": "at least",
    "dtype": "unknown dtype",
    "length": "values, got",
    "negative": "negative counts",
    "total": "add up",
    "range": "lie outside",
    "statistics": "uint32",
    "blocks": "block formats section",
}


def _exponents(code: int) -> tuple[int, int]:
    name = CODES[code]
    info = ml_dtypes.finfo(np.float64 if name == "float64" else getattr(ml_dtypes, name, name))
    return int(info.minexp - info.nmant), int(info.maxexp - 1)


def refusal(values: list[int] | None, n_formats: int) -> str | None:
    """The first reason ``values`` is refused (None: kept), straight from the format."""
    if values is None or len(values) < HEADER:
        return "short"
    code, numel, *others, lo_stored, n_bins = values[:HEADER]
    if not 0 <= code < len(CODES):
        return "dtype"
    if n_bins < 0 or len(values) < HEADER + n_bins + 2 * n_formats + N_STATS:
        return "length"
    if len(values) > HEADER + n_bins + 2 * n_formats + N_STATS:
        return "blocks"  # values after the statistics: no well-formed section, by chance
    bins = values[HEADER : HEADER + n_bins]
    casts = values[HEADER + n_bins : HEADER + n_bins + 2 * n_formats]
    stats = values[HEADER + n_bins + 2 * n_formats :]
    if min([numel, *others, *bins, *casts]) < 0:
        return "negative"
    if sum(others) + sum(bins) != numel:
        return "total"
    low, high = _exponents(code)
    if n_bins and not (
        low <= lo_stored - BINS_OFFSET and lo_stored - BINS_OFFSET + n_bins - 1 <= high
    ):
        return "range"
    if CODES[code] != "float64" and not all(0 <= s < 2**32 for s in stats):
        return "statistics"
    return None


def _statistic(bits: int, code: int) -> float:
    if CODES[code] == "float64":
        return float(np.array([bits], dtype=np.int64).view(np.float64)[0])
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def _varints(values: list[int]) -> bytes:
    out = bytearray()
    for value in values:
        value &= 2**64 - 1
        while value >= 0x80:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out)


def _valid(rng: np.random.Generator, code: int, n_bins: int, n_formats: int) -> list[int]:
    low, high = _exponents(code)
    n_bins = min(n_bins, high - low + 1)
    lo = int(rng.integers(low, high - n_bins + 2)) if n_bins else 0
    bins = rng.integers(0, 1000, n_bins).tolist()
    others = rng.integers(0, 50, 4).tolist()
    casts = rng.integers(0, 100, 2 * n_formats).tolist()
    if CODES[code] == "float64":
        stats = rng.integers(-(2**63), 2**63 - 1, N_STATS, endpoint=True).tolist()
    else:
        stats = rng.integers(0, 2**32, N_STATS).tolist()
    return [code, sum(others) + sum(bins), *others, lo + BINS_OFFSET, n_bins, *bins, *casts, *stats]


def _damaged(rng: np.random.Generator, values: list[int], n_formats: int, kind: int) -> list[int]:
    """``values`` damaged one way (kind 0..15); some damage leaves it valid."""
    v = list(values)
    n_bins = v[HEADER - 1]
    pick = int(rng.integers(0, 1 << 30))
    if kind == 0:
        return v[: pick % HEADER]  # short
    if kind == 1:
        v[0] = [-1, len(CODES), 2**62, -(2**63)][pick % 4]  # dtype
    elif kind == 2:
        v.append(pick)  # one value too many
    elif kind == 3:
        v.pop(pick % len(v))  # one value too few
    elif kind == 4:
        v[HEADER - 1] = [-1, -(2**63), 2**63 - 1, n_bins + 1][pick % 4]  # bins announced
    elif kind == 5:
        v[1 + pick % 5] = -1 - pick % 3  # a negative count
    elif kind == 6 and n_bins:
        v[HEADER + pick % n_bins] = -1  # a negative bin
    elif kind == 7 and n_formats:
        v[HEADER + n_bins + pick % (2 * n_formats)] = -(2**63)  # a negative cast
    elif kind == 8:
        v[1] += 1 if pick % 2 else -1  # counts do not add up
    elif kind == 9:
        v[HEADER - 2] += [-1, 1, -5000, 5000, 2**62][pick % 5]  # bins moved
    elif kind == 10:
        v[-1 - pick % N_STATS] = [-1, 2**32, 2**63 - 1, 2**32 - 1][pick % 4]  # a statistic
    elif kind == 11:
        v[pick % len(v)] = int(rng.integers(-(2**63), 2**63 - 1, endpoint=True))  # any field
    elif kind == 12:
        v[pick % len(v)] += int(rng.integers(-3, 4))
    return v


def _rows(seed: int, count: int, broken_varints: bool) -> tuple[list, list[bytes], np.ndarray]:
    """Vectors (None: no vector), their bytes (some with broken varints if asked: those go
    to the compiled pass whatever their size) and formats."""
    rng = np.random.default_rng(seed)
    vectors, parts, formats = [], [], []
    for i in range(count):
        n_formats = int(rng.integers(0, 4))
        code = int(rng.integers(0, len(CODES)))
        n_bins = int(rng.choice([0, 1, 2, int(rng.integers(3, 40)), 300]))
        values = _valid(rng, code, n_bins, n_formats)
        kind = int(rng.integers(0, 20))
        if kind in (16, 17) and not broken_varints:
            kind = 19  # valid
        if kind < 16:
            values = _damaged(rng, values, n_formats, kind)
        data = _varints(values)
        if kind == 16:
            values, data = None, data[:-1] + bytes([data[-1] | 0x80])  # its last varint cut
        elif kind == 17:
            values, data = None, data + bytes([0xFF] * 10 + [1])  # an 11-byte varint
        elif kind == 18 and i % 2:
            values, data = None, None  # no vector at all
        vectors.append(values)
        parts.append(data)
        formats.append(n_formats)
    return vectors, parts, np.array(formats, dtype=np.int64)


def _decode(parts: list[bytes | None], formats: np.ndarray):
    sizes = np.array([-1 if p is None else len(p) for p in parts], dtype=np.int64)
    contents = np.frombuffer(b"".join(p or b"" for p in parts), dtype=np.uint8)
    return decode_rows(contents, sizes, formats)


def _numpy_only(monkeypatch) -> None:
    """``decode_rows`` by its small-input path, the compiled pass made to fail."""
    from tandv_tb.event_files import numba_loops

    def refuse(*args):
        raise AssertionError("the compiled pass ran")

    monkeypatch.setattr(small_loops, "SMALL_BYTES", 1 << 40)
    monkeypatch.setattr(numba_loops, "scan_records", refuse)


@pytest.fixture(params=["numpy", "compiled"])
def decoder(request, monkeypatch):
    """``decode_rows`` by its small-input path or its compiled pass."""
    if request.param == "numpy":
        _numpy_only(monkeypatch)
    else:
        monkeypatch.setattr(small_loops, "SMALL_BYTES", -1)
    return request.param


@pytest.mark.parametrize("seed", range(4))
def test_decode_rows_keeps_exactly_what_the_format_allows(decoder, seed):
    vectors, parts, formats = _rows(seed, 3000, broken_varints=decoder == "compiled")
    reasons = [refusal(v, int(f)) for v, f in zip(vectors, formats)]
    assert set(reasons) == {*SAYS, None}  # every reason, and kept rows
    rows = _decode(parts, formats)
    kept = [i for i, reason in enumerate(reasons) if reason is None]
    assert rows.kept.tolist() == kept
    for row, i in enumerate(kept):
        values, n_formats = vectors[i], int(formats[i])
        code, n_bins = values[0], values[HEADER - 1]
        assert rows.dtype_codes[row] == code
        assert rows.counts[row].tolist() == values[1:6]
        assert rows.bins_lo[row] == (values[HEADER - 2] - BINS_OFFSET if n_bins else 0)
        bins = rows.bins[rows.bin_starts[row] : rows.bin_starts[row + 1]]
        assert bins.tolist() == values[HEADER : HEADER + n_bins]
        casts = rows.casts[rows.cast_starts[row] : rows.cast_starts[row + 1]]
        assert casts.tolist() == values[HEADER + n_bins : HEADER + n_bins + 2 * n_formats]
        expected = [_statistic(s, code) for s in values[-N_STATS:]]
        got = rows.statistics[row]
        assert got.view(np.int64).tolist() == np.array(expected).view(np.int64).tolist()


def test_both_decoders_give_the_same_arrays(monkeypatch):
    _, parts, formats = _rows(9, 4000, broken_varints=False)
    with monkeypatch.context() as patch:
        _numpy_only(patch)
        small = _decode(parts, formats)
    monkeypatch.setattr(small_loops, "SMALL_BYTES", -1)
    large = _decode(parts, formats)
    for field in small.__dataclass_fields__:
        a, b = getattr(small, field), getattr(large, field)
        assert a.dtype == b.dtype and a.shape == b.shape, field
        assert a.tobytes() == b.tobytes(), field


@pytest.mark.parametrize("seed", range(2))
def test_decode_vector_names_the_first_failed_check(seed):
    vectors, _, formats = _rows(seed, 1500, broken_varints=False)
    for values, n_formats in zip(vectors, formats):
        if values is None:
            continue
        reason = refusal(values, int(n_formats))
        names = tuple(f"f{k}" for k in range(n_formats))
        if reason is None:
            decode_vector(np.array(values, dtype=np.int64), names)
            continue
        with pytest.raises(ValueError, match=SAYS[reason]):
            decode_vector(np.array(values, dtype=np.int64), names)


@pytest.mark.parametrize("with_bins", [True, False])
def test_rows_without_bins_are_the_same_rows(decoder, with_bins):
    _, parts, formats = _rows(5, 2000, broken_varints=decoder == "compiled")
    sizes = np.array([-1 if p is None else len(p) for p in parts], dtype=np.int64)
    contents = np.frombuffer(b"".join(p or b"" for p in parts), dtype=np.uint8)
    full = decode_rows(contents, sizes, formats)
    rows = decode_rows(contents, sizes, formats, with_bins=with_bins)
    for field in full.__dataclass_fields__:
        if field == "bins" and not with_bins:
            assert rows.bins is None
        else:
            assert getattr(rows, field).tobytes() == getattr(full, field).tobytes(), field
