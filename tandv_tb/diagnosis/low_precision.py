"""The ``overflow``, ``underflow`` and ``scale`` findings, from the exact under/overflow
counts of the formats recorded at tracking time."""

from __future__ import annotations

import dataclasses

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.cast_estimate import bin_weights
from tandv_tb.diagnosis.base import Finding, Thresholds, percent
from tandv_tb.diagnosis.run_numerics import RunNumerics, first_stretches
from tandv_tb.disk import metadata
from tandv_tb.disk.record_columns import DecodedRows, decode_rows, ragged_index
from tandv_tb.store import NumericsStore


@dataclasses.dataclass
class FormatShares:
    """The exact cast counts of one recorded format, as shares, at the rows recording it."""

    format: str
    rows: np.ndarray  # row indices into the run's numerics
    under: np.ndarray  # underflow / finite non-zero values
    over: np.ndarray  # overflow / finite values


def format_shares(db: NumericsStore, numerics: RunNumerics) -> list[FormatShares]:
    """One ``FormatShares`` per format recorded by any tensor of the run."""
    by_format: dict[str, dict[int, int]] = {}
    for g, info in enumerate(numerics.tensors):
        for index, name in enumerate(info.formats):
            by_format.setdefault(name, {})[int(numerics.tag_ids[g])] = index
    finite = numerics.finite()
    nonzero = finite - numerics.columns["zero_count"]
    found = []
    for name, tags in sorted(by_format.items()):
        casts = db.casts(numerics.run, tags)
        rows = numerics.row_of(casts.tag_ids, casts.steps)
        keep = rows >= 0
        rows = rows[keep]
        with np.errstate(divide="ignore", invalid="ignore"):
            under = casts.columns["underflow"][keep] / nonzero[rows]
            over = casts.columns["overflow"][keep] / finite[rows]
        found.append(FormatShares(name, rows, np.nan_to_num(under), np.nan_to_num(over)))
    return found


def overflow_findings(
    numerics: RunNumerics, shares: list[FormatShares], thresholds: Thresholds
) -> list[Finding]:
    """Per tensor and format: the first step where the tensor's overflow share passes the
    warning threshold, and the first where it passes the error threshold (one error
    finding when both are the same step)."""
    found = []
    for fs in shares:
        tensors = numerics.tensor[fs.rows]  # ascending, each tensor's steps ascending
        first = {}
        for severity, limit in (
            ("error", thresholds.overflow_error),
            ("warning", thresholds.overflow_warning),
        ):
            above = np.flatnonzero(fs.over > limit)
            _, at = np.unique(tensors[above], return_index=True)
            first[severity] = dict(zip(tensors[above[at]].tolist(), above[at].tolist()))
        steps = numerics.steps[fs.rows]
        errors = {g: steps[i] for g, i in first["error"].items()}
        for severity, rows in first.items():
            for g, i in rows.items():
                if severity == "error" or errors.get(g) != steps[i]:
                    found.append(_overflow(numerics, fs, tensors, g, i, severity))
    return found


def _overflow(numerics, fs: FormatShares, tensors, g: int, i: int, severity: str) -> Finding:
    info, step = numerics.tensors[g], int(numerics.steps[fs.rows[i]])
    last = int(np.searchsorted(tensors, g, side="right")) - 1
    return Finding(
        numerics.run,
        step,
        "overflow",
        severity,
        info.tensor_type,
        info.name,
        float(fs.over[i]),
        f"{fs.format} overflows from step {step}: {info.tensor_type} {info.name!r} loses "
        f"{percent(fs.over[i])} of its finite values to overflow ({percent(fs.over[last])} "
        f"at step {int(numerics.steps[fs.rows[last]])})",
        format=fs.format,
    )


def underflow_findings(
    numerics: RunNumerics, shares: list[FormatShares], thresholds: Thresholds
) -> list[Finding]:
    """Per tensor and format: the first step from which the tensor loses more than
    ``underflow_share`` of its non-zero values to zero at ``underflow_window`` consecutive
    recorded steps."""
    found = []
    for fs in shares:
        above = fs.under > thresholds.underflow_share
        tensors = numerics.tensor[fs.rows]
        starts, _ = first_stretches(above, tensors, thresholds.underflow_window)
        for i in starts.tolist():
            g = int(numerics.tensor[fs.rows[i]])
            info, step = numerics.tensors[g], int(numerics.steps[fs.rows[i]])
            last = int(np.searchsorted(tensors, g, side="right")) - 1  # tensors ascending
            last_step = int(numerics.steps[fs.rows[last]])
            found.append(
                Finding(
                    numerics.run,
                    step,
                    "underflow",
                    "warning",
                    info.tensor_type,
                    info.name,
                    float(fs.under[i]),
                    f"{info.tensor_type} {info.name!r} loses {percent(fs.under[i])} of its "
                    f"non-zero values to zero in {fs.format} from step {step} "
                    f"({percent(fs.under[last])} at step {last_step})",
                    format=fs.format,
                )
            )
    return found


def scale_findings(
    db: NumericsStore, numerics: RunNumerics, shares: list[FormatShares], thresholds: Thresholds
) -> list[Finding]:
    """Per tensor and format with an ``underflow`` finding or an ``overflow`` above the
    warning threshold: the power-of-two scale 2**k that minimises the estimated share of
    values lost (underflow + overflow), from the exponent histograms of up to
    ``scale_steps`` recorded steps from its first such step. Shifting a tensor by 2**k
    shifts its bins by k; the loss of each shift is estimated by the dashboards' rule
    (``tandv_tb.cast_estimate``)."""
    if not shares:
        return []
    wanted: dict[tuple[int, str], np.ndarray] = {}  # (tensor, format) -> rows
    steps = numerics.unique_steps
    grid = np.unique(np.linspace(0, len(steps) - 1, thresholds.scale_steps).round())
    sample = steps[grid.astype(np.int64)]
    for fs in shares:
        tensors = numerics.tensor[fs.rows]
        under, _ = first_stretches(
            fs.under > thresholds.underflow_share, tensors, thresholds.underflow_window
        )
        over = np.flatnonzero(fs.over > thresholds.overflow_warning)
        first: dict[int, int] = {}
        for i in [*under.tolist(), *over.tolist()]:
            g, step = int(tensors[i]), int(numerics.steps[fs.rows[i]])
            first[g] = min(first.get(g, step), step)
        for g, step in first.items():
            wanted[g, fs.format] = _sample_rows(numerics, g, step, sample)
    if not wanted:
        return []
    histograms = Histograms.read(db, numerics, np.unique(np.concatenate(list(wanted.values()))))
    found = []
    for (g, format_name), rows in sorted(wanted.items()):
        info = numerics.tensors[g]
        n_steps, summed = histograms.summed(rows)
        if not n_steps:
            continue
        k, before, after = best_scale(summed, format_name)
        step = int(numerics.steps[rows[0]])
        advice = f"x 2^{k}" if k else "no power-of-two scale helps (x 2^0)"
        found.append(
            Finding(
                numerics.run,
                step,
                "scale",
                "info",
                info.tensor_type,
                info.name,
                float(k),
                f"{info.tensor_type} {info.name!r} in {format_name}: {advice}: "
                f"underflow {percent(before[0])} -> {percent(after[0])}, overflow "
                f"{percent(before[1])} -> {percent(after[1])} (estimated over "
                f"{n_steps} recorded step{'s' * (n_steps != 1)} from step {step})",
                format=format_name,
                still_lost=float(after[0] + after[1]),
            )
        )
    return found


def _sample_rows(numerics: RunNumerics, g: int, first: int, sample: np.ndarray) -> np.ndarray:
    """Tensor g's row at step ``first`` and its rows nearest the run's ``sample`` of steps
    after it (a grid shared by every tensor, so that few steps are read)."""
    start, end = numerics.starts[g], numerics.starts[g + 1]
    held = numerics.steps[start:end]
    begin = int(np.searchsorted(held, first))
    later = sample[sample > first]
    at = np.minimum(np.searchsorted(held, later), len(held) - 1)
    return start + np.unique(np.concatenate(([begin], at)))


@dataclasses.dataclass
class Histograms:
    """The exponent histograms of some rows of a run's numerics, decoded from their stored
    vectors: numerics row r is decoded row ``index[r]`` (-1: not read or unreadable)."""

    index: np.ndarray  # int64[N]
    decoded: DecodedRows

    @classmethod
    def read(cls, db: NumericsStore, numerics: RunNumerics, rows: np.ndarray) -> Histograms:
        tensors = numerics.tensor[rows]
        tag_ids = numerics.tag_ids[np.unique(tensors)].tolist()
        read = db.rows(
            numerics.run,
            tag_ids,
            (),
            vectors=True,
            steps=tuple(np.unique(numerics.steps[rows]).tolist()),
        )
        at = numerics.row_of(read.tag_ids, read.steps)
        wanted = np.zeros(len(numerics), dtype=bool)
        wanted[rows] = True
        # the read holds every asked tag at every asked step: decode only the rows asked for
        take = np.flatnonzero((at >= 0) & wanted[np.maximum(at, 0)])
        data, offsets = read.vectors
        sizes = np.diff(offsets)[take]
        n_formats = np.array([len(info.formats) for info in numerics.tensors], dtype=np.int64)
        decoded = decode_rows(
            data[ragged_index(offsets[take], sizes)], sizes, n_formats[numerics.tensor[at[take]]]
        )
        index = np.full(len(numerics), -1, dtype=np.int64)
        index[at[take[decoded.kept]]] = np.arange(len(decoded))
        return cls(index, decoded)

    def summed(self, rows: np.ndarray) -> tuple[int, dict[str, tuple[int, np.ndarray]]]:
        """How many of ``rows`` have a histogram, and their histograms added up per dtype:
        ``{dtype: (lowest bin, counts as float64)}`` (the estimate is linear in the counts,
        so one sum stands for all steps)."""
        d = self.index[rows]
        d = d[d >= 0]
        decoded = self.decoded
        n_bins = np.diff(decoded.bin_starts)[d]
        found = {}
        for code in np.unique(decoded.dtype_codes[d[n_bins > 0]]).tolist():
            mine = (decoded.dtype_codes[d] == code) & (n_bins > 0)
            lows, sizes = decoded.bins_lo[d[mine]], n_bins[mine]
            low = int(lows.min())
            at = ragged_index(decoded.bin_starts[d[mine]], sizes)
            exponents = at - np.repeat(decoded.bin_starts[d[mine]] - (lows - low), sizes)
            total = np.bincount(exponents, weights=decoded.bins[at])
            found[metadata.DTYPE_CODES[code]] = (low, total)
        return len(d), found


def best_scale(
    summed: dict[str, tuple[int, np.ndarray]], format_name: str
) -> tuple[int, tuple[float, float], tuple[float, float]]:
    """``(k, (underflow, overflow) shares at 2**0, the same at 2**k)`` for the k that
    minimises the estimated share lost by casting the values times 2**k to the format
    (the smallest |k| among equals), from histograms ``{dtype: (lowest bin, counts)}``."""
    target = fmt.info(format_name)
    total = float(sum(c.sum() for _, c in summed.values()))
    if total == 0:
        return 0, (0.0, 0.0), (0.0, 0.0)
    low = min(lo for lo, _ in summed.values())
    high = max(lo + len(c) - 1 for lo, c in summed.values())
    # every shift from all values below the format to all above it, and no shift
    low_k = min(target.min_exponent - high - 2, 0)
    ks = np.arange(low_k, max(target.max_exponent - low + 2, 0) + 1)
    under, over = np.zeros(len(ks)), np.zeros(len(ks))
    for dtype, (lo, counts) in summed.items():
        under_w, over_w = bin_weights(dtype, format_name)
        index = lo + np.arange(len(counts))[None, :] + ks[:, None] - fmt.info(dtype).min_exponent
        index = np.clip(index, 0, len(under_w) - 1)  # beyond the dtype: as its edge bins
        under += under_w[index] @ counts
        over += over_w[index] @ counts
    loss = under + over
    ties = np.flatnonzero(loss <= loss.min() * (1 + 1e-9) + 1e-9)
    best = int(ties[np.argmin(np.abs(ks[ties]))])
    zero = -low_k
    before = (under[zero] / total, over[zero] / total)
    return int(ks[best]), before, (under[best] / total, over[best] / total)
