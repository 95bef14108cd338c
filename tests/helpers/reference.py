"""An independent reference for the statistics engine: numpy in float64, ml_dtypes casts.

Deliberately written the slow, obvious way (frexp, float64 moments, real casts), so it
shares no code and no trick with the engine it checks.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from tandv_tb.formats import numpy_dtype

_LAST_PLACES = 2 * float(np.finfo(np.float64).smallest_subnormal)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def reference(values: np.ndarray, formats: tuple[str, ...] = ()) -> dict:
    """Counts, bins, statistics and cast counts of ``values`` (any float dtype)."""
    flat = values.reshape(-1)
    x = flat.astype(np.float64)
    finite = np.isfinite(x)
    f = x[finite]
    nonzero = f[f != 0]
    exponents = np.frexp(nonzero)[1] - 1
    bins = {int(n): int(c) for n, c in zip(*np.unique(exponents, return_counts=True))}
    out = {
        "numel": x.size,
        "zero_count": int(np.sum(f == 0)),
        "nan_count": int(np.sum(np.isnan(x))),
        "posinf_count": int(np.sum(x == np.inf)),
        "neginf_count": int(np.sum(x == -np.inf)),
        "bins": bins,
        "underflow": {},
        "overflow": {},
    }
    out["statistics"] = _moments(f)
    for name in formats:
        cast = _cast(flat[finite], numpy_dtype(name)).astype(np.float64)
        out["underflow"][name] = int(np.sum((f != 0) & (cast == 0)))
        out["overflow"][name] = int(np.sum(~np.isfinite(cast)))
    return out


def _cast(values: np.ndarray, target: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            return values.astype(target)
        except TypeError:  # no direct ml_dtypes cast: through float32 (exact for these)
            return values.astype(np.float32).astype(target)


def _moments(f: np.ndarray) -> dict[str, float]:
    if f.size == 0:
        return dict.fromkeys(
            [
                "mean",
                "std",
                "mean_abs",
                "max_abs",
                "min_abs",
                "min_abs_nonzero",
                "rm2",
                "rm4",
                "rm8",
            ],
            math.nan,
        )
    a = np.abs(f)
    top = a.max()
    unit = a / top if top > 0 else a
    scaled = f / top if top > 0 else f
    scale = top if top > 0 else 1.0
    nonzero = a[a > 0]
    return {
        "mean": scale * scaled.mean(),
        "std": scale * scaled.std(),
        "mean_abs": scale * unit.mean(),
        "max_abs": top,
        "min_abs": a.min(),
        "min_abs_nonzero": nonzero.min() if nonzero.size else math.nan,
        **{f"rm{p}": scale * np.mean(unit**p) ** (1 / p) for p in (2, 4, 8)},
    }


def neighbours(value: float, dtype: np.dtype) -> list[float]:
    """``value`` and the representable values just below and above it in ``dtype``."""
    uint = _UINT[dtype.itemsize]
    pattern = np.array([value], dtype=dtype).view(uint)[0]
    steps = [pattern - uint(1), pattern, pattern + uint(1)] if pattern > 0 else [pattern]
    return [float(np.array([p], dtype=uint).view(dtype)[0]) for p in steps]


def crafted(dtype_name: str) -> np.ndarray:
    """Zeros of both signs, subnormals, powers of two and neighbours, max, NaN, +-Inf."""
    dtype = numpy_dtype(dtype_name)
    fi = ml_dtypes.finfo(dtype)
    values = [0.0, -0.0, 1.0, -1.0, 1.5, 3.0]
    for special in (fi.smallest_subnormal, fi.smallest_normal, fi.max, 2.0, 0.5, 1.0):
        for v in neighbours(float(special), dtype):
            values += [v, -v]
    lo, hi = math.frexp(float(fi.smallest_subnormal))[1], math.frexp(float(fi.max))[1]
    for n in range(lo - 1, hi, max(1, (hi - lo) // 40)):
        values += [2.0**n, -(2.0**n) * 1.25]
    array = np.array(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        out = array.astype(dtype)
    specials = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)
    special_cast = _cast(specials, dtype)
    return np.concatenate([out, special_cast[np.isnan(special_cast) | np.isinf(special_cast)]])


def random_binades(dtype_name: str, size: int, binades: int = 60, seed: int = 0) -> np.ndarray:
    """``size`` random values of both signs spanning ``binades`` binades around 1 (clipped to
    the dtype's range), with some zeros."""
    rng = np.random.default_rng(seed)
    dtype = numpy_dtype(dtype_name)
    fi = ml_dtypes.finfo(dtype)
    lo = max(-binades // 2, math.frexp(float(fi.smallest_subnormal))[1] - 2)
    hi = min(binades // 2, math.frexp(float(fi.max))[1])
    exps = rng.integers(lo, hi, size)
    values = rng.uniform(1, 2, size) * np.exp2(exps.astype(np.float64))
    values *= rng.choice([-1.0, 1.0], size)
    values[rng.random(size) < 0.01] = 0.0
    with np.errstate(over="ignore"):
        return values.astype(dtype)


# ------------------------------------------------- comparing the engine with the reference


def torch_tensor(values: np.ndarray):
    """``values`` (any float dtype torch also has) as a CPU torch tensor, bit for bit."""
    import torch

    name = values.dtype.name
    if name in ("float64", "float32", "float16"):
        return torch.from_numpy(values.copy())
    uint = _UINT[values.dtype.itemsize]
    return torch.from_numpy(values.view(uint).copy()).view(getattr(torch, name))


def assert_matches(
    stats, values: np.ndarray, formats, rtol: float, ref: dict | None = None
) -> None:
    """The engine's ``TensorStats`` of ``values`` equal the reference: counts, bins and casts
    exactly, statistics within ``rtol`` (``mean`` relative to ``rm2``) plus two float64
    subnormal steps: a statistic whose true value is subnormal in float64 (the mean of a few
    tiny float64 values) cannot be closer than its rounding."""
    assert_record_matches(stats.to_record(), values, formats, rtol, ref)


def assert_record_matches(
    record, values: np.ndarray, formats=(), rtol: float = 1e-5, ref: dict | None = None
) -> None:
    """A ``NumericsRecord`` (one read back from disk) is that of ``values``, as
    ``assert_matches`` checks it."""
    from tandv_tb.event_files.record import STATISTICS
    from tandv_tb.formats import info

    ref = ref or reference(values, formats)
    for key in ("numel", "zero_count", "nan_count", "posinf_count", "neginf_count"):
        assert getattr(record, key) == ref[key], key
    assert record.exponent_histogram() == ref["bins"]
    dtype = info(values.dtype.name)
    assert all(dtype.min_exponent <= n <= dtype.max_exponent for n in ref["bins"])
    assert record.underflow == ref["underflow"]
    assert record.overflow == ref["overflow"]
    expected = ref["statistics"]
    for key in STATISTICS:
        got, want = record.statistics[key], expected[key]
        if math.isnan(want):
            assert math.isnan(got), key
            continue
        assert math.isfinite(got), key
        scale = expected["rm2"] if key == "mean" else abs(want)
        assert abs(got - want) <= rtol * scale + _LAST_PLACES, (key, got, want)
