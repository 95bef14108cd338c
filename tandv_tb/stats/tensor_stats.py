"""Host-side results of the statistics engine.

``TensorStats`` holds *sufficient* statistics of one tensor (or of several calls of one
module in one step): counts, the exponent histogram, cast counts per format, the block
formats' counts and sums of squares, and scaled moments. Two of them merge exactly
(``merge``); ``to_record`` turns one into the ``NumericsRecord`` that is written to disk and
served: the contract's counts, bins and scalar statistics.

The engine's kernels give two vectors (``engine_layout`` gives their lengths), for the
formats in ``formats.check_formats`` order (element formats, then block formats):

- counts (integers): ``COUNTS``, the histogram over the dtype's whole exponent range, an
  (underflow, overflow) pair per format, then per block format ``BLOCK_COUNTS`` and the
  number of blocks per scale exponent (``BlockFormat.scale_range`` of the dtype);
- moments (floats): ``MOMENTS``, then per block format ``BLOCK_MOMENTS``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.event_files.record import (
    COUNTS,
    STATISTICS,
    BlockCounts,
    NumericsRecord,
    TensorCounts,
)

#: The layout of the engine's float vector: the finite values x are scaled by ``scale``
#: (their max |x|, or 1 when that is 0) so no power overflows; s = x / scale.
MOMENTS = (
    "scale",
    "sum_s",  # sum(s)
    "sum_abs_s",  # sum(|s|)
    "sum_s2",  # sum(s**2)
    "sum_s4",  # sum(s**4)
    "sum_s8",  # sum(s**8)
    "m2_s",  # sum((s - mean(s))**2)
    "max_abs",  # max |x| (0 when there is no finite value)
    "min_abs",  # min |x| (inf when there is no finite value)
    "min_abs_nonzero",  # min |x| over x != 0 (inf when there is none)
)
_POWERS = {"sum_s2": 2, "sum_s4": 4, "sum_s8": 8}
#: Per block format, after the (underflow, overflow) pair, in the counts vector.
BLOCK_COUNTS = ("zero_blocks", "clamped_low", "clamped_high")
#: Per block format, in the moments vector: the sums of squares of the finite values and of
#: their quantization errors, in units of 4**exponent (``BlockCounts``).
BLOCK_MOMENTS = ("exponent", "signal", "error")


@dataclasses.dataclass
class TensorStats(TensorCounts):
    """Mergeable statistics of one tensor, decoded from the engine's packed output.

    ``hist[i]`` counts the finite non-zero values with exponent ``hist_lo + i``; the
    histogram spans the whole exponent range of ``dtype``.
    """

    hist_lo: int
    hist: np.ndarray
    formats: tuple[fmt.Format, ...]
    underflow: np.ndarray
    overflow: np.ndarray
    moments: dict[str, float]
    #: Per block format of ``formats``: its ``BlockCounts`` (whose under/overflow are
    #: those of ``underflow``/``overflow``).
    blocks: dict[str, BlockCounts] = dataclasses.field(default_factory=dict)

    @classmethod
    def unpack(
        cls, dtype: str, formats: tuple[fmt.Format, ...], counts: np.ndarray, moments: np.ndarray
    ) -> TensorStats:
        """Decode the engine's vectors (``engine_layout`` gives their lengths) for the
        ``formats`` of ``check_formats``."""
        info = fmt.info(dtype)
        counts = np.asarray(counts, dtype=np.int64)
        moments = np.asarray(moments, np.float64)
        head = len(COUNTS)
        numel, zeros, nans, posinf, neginf = counts[:head].tolist()
        casts_end = head + info.n_bins + 2 * len(formats)
        casts = counts[head + info.n_bins : casts_end]
        blocks = _unpack_blocks(info, formats, casts, counts[casts_end:], moments[len(MOMENTS) :])
        return cls(
            dtype=info.name,
            numel=numel,
            zero_count=zeros,
            nan_count=nans,
            posinf_count=posinf,
            neginf_count=neginf,
            hist_lo=info.min_exponent,
            hist=counts[head : head + info.n_bins].copy(),
            formats=tuple(formats),
            underflow=casts[0::2].copy(),
            overflow=casts[1::2].copy(),
            moments=dict(zip(MOMENTS, moments[: len(MOMENTS)].tolist())),
            blocks=blocks,
        )

    def merge(self, other: TensorStats) -> TensorStats:
        """Statistics of the two tensors' values together (exact for counts and bins)."""
        if self.formats != other.formats:
            raise ValueError(f"cannot merge stats of formats {self.formats} and {other.formats}")
        lo = min(self.hist_lo, other.hist_lo)
        hi = max(self.hist_lo + len(self.hist), other.hist_lo + len(other.hist))
        hist = np.zeros(hi - lo, dtype=np.int64)
        for part in (self, other):
            hist[part.hist_lo - lo : part.hist_lo - lo + len(part.hist)] += part.hist
        wider = max(self.dtype, other.dtype, key=lambda d: (fmt.info(d).n_bins, d))
        return TensorStats(
            dtype=wider,
            numel=self.numel + other.numel,
            zero_count=self.zero_count + other.zero_count,
            nan_count=self.nan_count + other.nan_count,
            posinf_count=self.posinf_count + other.posinf_count,
            neginf_count=self.neginf_count + other.neginf_count,
            hist_lo=lo,
            hist=hist,
            formats=self.formats,
            underflow=self.underflow + other.underflow,
            overflow=self.overflow + other.overflow,
            moments=_merge_moments(self, other),
            blocks={name: self.blocks[name].merge(other.blocks[name]) for name in self.blocks},
        )

    def to_record(self) -> NumericsRecord:
        """The contract's counts and statistics, with the histogram trimmed."""
        nonzero = self.hist.nonzero()[0]
        if len(nonzero):
            first, last = nonzero[0], nonzero[-1]
            bins_lo, counts = self.hist_lo + int(first), self.hist[first : last + 1].copy()
        else:
            bins_lo, counts = 0, np.zeros(0, dtype=np.int64)
        elements = fmt.split_formats(self.formats)[0]
        return NumericsRecord(
            dtype=self.dtype,
            numel=self.numel,
            zero_count=self.zero_count,
            nan_count=self.nan_count,
            posinf_count=self.posinf_count,
            neginf_count=self.neginf_count,
            bins_lo=bins_lo,
            counts=counts,
            statistics=self._statistics(),
            underflow=dict(zip(elements, self.underflow.tolist())),  # elements come first
            overflow=dict(zip(elements, self.overflow.tolist())),
            blocks={name: block.trimmed() for name, block in self.blocks.items()},
        )

    def _statistics(self) -> dict[str, float]:
        n = self.finite_count
        if n == 0:
            return dict.fromkeys(STATISTICS, math.nan)
        m = self.moments
        scale = m["scale"]
        min_nonzero = m["min_abs_nonzero"]
        return {
            "mean": scale * (m["sum_s"] / n),
            "std": scale * math.sqrt(max(m["m2_s"], 0.0) / n),
            "mean_abs": scale * (m["sum_abs_s"] / n),
            "max_abs": m["max_abs"],
            "min_abs": m["min_abs"],
            "min_abs_nonzero": min_nonzero if math.isfinite(min_nonzero) else math.nan,
            **{f"rm{p}": scale * (m[key] / n) ** (1.0 / p) for key, p in _POWERS.items()},
        }


def _merge_moments(a: TensorStats, b: TensorStats) -> dict[str, float]:
    """Combine scaled moments: rescale both to the larger scale, merge M2 (Chan et al.)."""
    na, nb = a.finite_count, b.finite_count
    if na == 0 or nb == 0:
        return dict((a if nb == 0 else b).moments)
    ma, mb = a.moments, b.moments
    scale = max(ma["scale"], mb["scale"])
    ra, rb = ma["scale"] / scale, mb["scale"] / scale
    merged = {"scale": scale}
    for key in ("sum_s", "sum_abs_s"):
        merged[key] = ma[key] * ra + mb[key] * rb
    for key, p in _POWERS.items():
        merged[key] = ma[key] * ra**p + mb[key] * rb**p
    delta = mb["sum_s"] * rb / nb - ma["sum_s"] * ra / na
    merged["m2_s"] = ma["m2_s"] * ra**2 + mb["m2_s"] * rb**2 + delta**2 * na * nb / (na + nb)
    merged["max_abs"] = max(ma["max_abs"], mb["max_abs"])
    merged["min_abs"] = min(ma["min_abs"], mb["min_abs"])
    merged["min_abs_nonzero"] = min(ma["min_abs_nonzero"], mb["min_abs_nonzero"])
    return merged


def _unpack_blocks(
    info: fmt.FormatInfo,
    formats: tuple[fmt.Format, ...],
    casts: np.ndarray,
    counts: np.ndarray,
    moments: np.ndarray,
) -> dict[str, BlockCounts]:
    blocks = {}
    blocks_of = fmt.split_formats(formats)[1]
    first = len(formats) - len(blocks_of)
    at = 0
    for k, block in enumerate(blocks_of):
        lo, n = block.scale_range(info.min_exponent, info.max_exponent)
        fields = counts[at : at + len(BLOCK_COUNTS)].tolist()
        scales = counts[at + len(BLOCK_COUNTS) : at + len(BLOCK_COUNTS) + n].copy()
        at += len(BLOCK_COUNTS) + n
        exponent, signal, error = moments[len(BLOCK_MOMENTS) * k : len(BLOCK_MOMENTS) * (k + 1)]
        blocks[block] = BlockCounts(
            int(casts[2 * (first + k)]),
            int(casts[2 * (first + k) + 1]),
            *fields,
            scale_lo=lo,
            scales=scales,
            exponent=int(exponent),
            signal=float(signal),
            error=float(error),
        )
    return blocks


def engine_layout(dtype: str, formats: tuple[fmt.Format, ...]) -> tuple[int, int]:
    """Lengths of the engine's count and moment vectors for a dtype and formats."""
    info = fmt.info(dtype)
    blocks = fmt.split_formats(formats)[1]
    block_counts = sum(
        len(BLOCK_COUNTS) + b.scale_range(info.min_exponent, info.max_exponent)[1] for b in blocks
    )
    n_counts = len(COUNTS) + info.n_bins + 2 * len(formats) + block_counts
    return n_counts, len(MOMENTS) + len(BLOCK_MOMENTS) * len(blocks)
