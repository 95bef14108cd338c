"""The CPU kernel: one compiled (numba) pass family over a float32 or float64 array.

Array libraries need a dozen full passes (and temporaries) for what this does in three
reads of the data: (1) counts, exponent histogram, min/max and cast
counts; (2) the scaled power sums; (3) the centred second moment (two-pass, so the standard
deviation stays exact for LayerNorm-like data). Narrower dtypes are widened to float32
first (exact). The output vectors follow ``record.engine_layout``. Large arrays are split
over a few plain threads.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os

import numba
import numpy as np

from tandv_tb import formats as fmt

_WORKERS = max(1, min(8, os.cpu_count() or 1))
_MIN_CHUNK = 1 << 16


@numba.njit(cache=True, nogil=True)
def _exponent(bits: int, mant_bits: int, bias: int) -> int:
    """floor(log2|x|) of a finite non-zero value from its sign-cleared bit pattern."""
    field = bits >> mant_bits
    if field > 0:
        return field - bias
    mantissa = bits
    top = -1
    while mantissa:
        mantissa >>= 1
        top += 1
    return top + 1 - bias - mant_bits


@numba.njit(cache=True, nogil=True)
def _pass_counts(bits, sign_mask, inf_bits, mant_bits, bias, hist_lo, n_bins, thresholds):
    """[zero, nan, posinf, neginf], histogram, cast counts and the bit patterns of
    [max, min, min non-zero] |x|. Decided on bit patterns alone, so a flush-to-zero mode
    (``torch.set_flush_denormal``) cannot hide subnormals; ``thresholds`` holds bit
    patterns too (for non-negative floats, their order is the values' order)."""
    n_formats = thresholds.shape[0]
    special = np.zeros(4, np.int64)
    hist = np.zeros(n_bins, np.int64)
    casts = np.zeros((n_formats, 2), np.int64)
    max_bits, min_bits, min_nonzero = 0, inf_bits, inf_bits
    for i in range(len(bits)):
        magnitude = bits[i] & sign_mask
        if magnitude >= inf_bits:
            if magnitude > inf_bits:
                special[1] += 1
            elif bits[i] > 0:
                special[2] += 1
            else:
                special[3] += 1
            continue
        max_bits = max(max_bits, magnitude)
        min_bits = min(min_bits, magnitude)
        if magnitude == 0:
            special[0] += 1
        else:
            min_nonzero = min(min_nonzero, magnitude)
            hist[_exponent(magnitude, mant_bits, bias) - hist_lo] += 1
        side = 1 if bits[i] < 0 else 0
        for f in range(n_formats):
            if magnitude == 0:
                casts[f, 1] += thresholds[f, 6]
            elif magnitude <= thresholds[f, side]:
                casts[f, 0] += 1
            elif magnitude >= thresholds[f, 2 + side] or magnitude < thresholds[f, 4 + side]:
                casts[f, 1] += 1
    return special, hist, casts, np.array([max_bits, min_bits, min_nonzero], np.int64)


@numba.njit(cache=True, nogil=True)
def _pass_powers(values, scale):
    """Sums of s, |s|, s**2, s**4, s**8 over the finite values, s = x / scale."""
    s1 = s_abs = s2 = s4 = s8 = 0.0
    for i in range(len(values)):
        x = np.float64(values[i])
        if np.isfinite(x):
            s = x / scale
            q = s * s
            q2 = q * q
            s1 += s
            s_abs += abs(s)
            s2 += q
            s4 += q2
            s8 += q2 * q2
    return np.array([s1, s_abs, s2, s4, s8])


@numba.njit(cache=True, nogil=True)
def _pass_centred(values, scale, mean_s):
    """sum((s - mean_s)**2) over the finite values."""
    acc = 0.0
    for i in range(len(values)):
        x = np.float64(values[i])
        if np.isfinite(x):
            d = x / scale - mean_s
            acc += d * d
    return acc


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(
        max_workers=_WORKERS, thread_name_prefix="tandv-stats"
    )


def _map_chunks(kernel, arrays: tuple[np.ndarray, ...], *args) -> list:
    """``kernel`` over contiguous chunks of ``arrays`` on plain threads (kernels drop the
    GIL; idle threads sleep, unlike an OpenMP pool that would spin against torch's)."""
    n = len(arrays[0])
    chunks = min(_WORKERS, max(1, n // _MIN_CHUNK))
    if chunks == 1:
        return [kernel(*arrays, *args)]
    bounds = np.linspace(0, n, chunks + 1).astype(np.int64)
    jobs = [
        _pool().submit(kernel, *(a[lo:hi] for a in arrays), *args)
        for lo, hi in zip(bounds[:-1], bounds[1:])
    ]
    return [job.result() for job in jobs]


@functools.cache
def threshold_bits(dtype: str, formats: tuple[str, ...], wide: bool) -> np.ndarray:
    """The cast thresholds of ``formats`` as bit patterns of the compute dtype (float32, or
    float64 when ``wide``); the last column is 1 where 0 itself overflows. Read-only."""
    compute = (np.float64, np.int64) if wide else (np.float32, np.int32)
    table = np.zeros((len(formats), 7), np.int64)
    with fmt.gradual_underflow():
        for row, name in enumerate(formats):
            values = fmt.cast_thresholds(dtype, name).as_row()
            table[row, :6] = np.array(values[:6], dtype=compute[0]).view(compute[1])
            table[row, 6] = int(values[6])
    table.flags.writeable = False
    return table


def compute_cpu(values: np.ndarray, dtype: str, formats: tuple[str, ...]):
    """Counts and moments vectors (``record.engine_layout``) of a host array of ``dtype``.

    ``values`` holds the tensor's values as float32 (any dtype narrower than float64,
    widened exactly) or float64.
    """
    values = np.ascontiguousarray(values).reshape(-1)
    wide = values.dtype == np.float64
    float_type, int_type = (np.float64, np.int64) if wide else (np.float32, np.int32)
    bits = values.view(int_type)
    sign_mask = int_type(np.iinfo(int_type).max)
    inf_bits = int_type(np.array(np.inf, float_type).view(int_type))
    mant_bits, bias = (52, 1023) if wide else (23, 127)
    compute_info = fmt.info("float64" if wide else "float32")
    info = fmt.info(dtype)
    parts = _map_chunks(
        _pass_counts,
        (bits,),
        sign_mask,
        inf_bits,
        mant_bits,
        bias,
        compute_info.min_exponent,
        compute_info.n_bins,
        threshold_bits(dtype, formats, wide),
    )
    special = sum(p[0] for p in parts)
    hist = sum(p[1] for p in parts)
    casts = sum(p[2] for p in parts)
    extremes_bits = np.stack([p[3] for p in parts]).astype(int_type)
    extremes = extremes_bits.view(float_type).astype(np.float64)
    max_abs = float(extremes[:, 0].max())
    scale = max_abs if max_abs > 0 else 1.0
    powers = sum(_map_chunks(_pass_powers, (values,), scale))
    finite = len(values) - int(special[1:].sum())
    mean_s = powers[0] / finite if finite else 0.0
    m2 = float(sum(_map_chunks(_pass_centred, (values,), scale, mean_s)))
    first = info.min_exponent - compute_info.min_exponent
    counts = np.concatenate(
        [[len(values)], special, hist[first : first + info.n_bins], casts.reshape(-1)]
    )
    moments = np.array(
        [
            scale,
            *powers,
            m2,
            max_abs,
            float(extremes[:, 1].min()),
            float(extremes[:, 2].min()),
        ]
    )
    return counts.astype(np.int64), moments
