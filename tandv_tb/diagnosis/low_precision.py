"""The ``overflow``, ``underflow`` and ``scale`` findings, from the exact under/overflow
counts of the formats recorded at tracking time.

Element formats (``float8_e4m3fn``...): an overflow is an error or a warning by its share;
a ``scale`` (info) is the per-tensor power-of-two scale that would remedy a tensor's
underflow or overflow. Block-scaled formats (``tandv_tb.formats.blocks``), read from the
store's block counts: ``underflow`` alike; ``overflow`` is a value that saturates at its
block's largest element value, a bounded loss (a warning at most; none under ``:rceil``,
whose scale saturates nothing); and ``scale`` (a warning) is blocks whose scale clamps:
more than ``underflow_share`` of a tensor's non-zero blocks get a scale outside the
scale's range at ``underflow_window`` consecutive recorded steps (their values round
with a scale that does not fit them: most of them to zero where it clamps low). A block
format scales itself, so no per-tensor scale is suggested for it."""

from __future__ import annotations

import dataclasses

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.diagnosis.base import Finding, Thresholds, percent
from tandv_tb.diagnosis.run_numerics import RunNumerics, first_stretches
from tandv_tb.event_files import metadata
from tandv_tb.event_files.record_columns import DecodedRows, decode_rows
from tandv_tb.filesystems.ranges import ragged_index
from tandv_tb.formats.estimate import bin_weights
from tandv_tb.store import NumericsStore


@dataclasses.dataclass
class FormatShares:
    """The exact cast counts of one recorded format, as shares, at the rows recording it."""

    format: fmt.Format
    rows: np.ndarray  # row indices into the run's numerics
    under: np.ndarray  # underflow / finite non-zero values
    over: np.ndarray  # overflow / finite values
    #: A block format's blocks whose scale clamps / its non-empty blocks (low, high).
    clamped: tuple[np.ndarray, np.ndarray] | None = None


def format_shares(db: NumericsStore, numerics: RunNumerics) -> list[FormatShares]:
    """One ``FormatShares`` per format recorded by any tensor of the run: the element
    formats, then the block-scaled ones."""
    finite = numerics.finite()
    nonzero = finite - numerics.columns["zero_count"]
    found = []
    for section in (fmt.CASTS, fmt.BLOCKS):
        by_format: dict[fmt.Format, dict[int, int]] = {}
        for g, info in enumerate(numerics.tensors):
            for index, name in enumerate(info.in_section(section)):
                by_format.setdefault(name, {})[int(numerics.tag_ids[g])] = index
        for name, tags in sorted(by_format.items()):
            read = db.per_format(numerics.run, name, tags)
            rows = numerics.row_of(read.tag_ids, read.steps)
            keep = rows >= 0
            rows, c = rows[keep], {k: v[keep] for k, v in read.columns.items()}
            clamped = None
            with np.errstate(divide="ignore", invalid="ignore"):
                under = np.nan_to_num(c["underflow"] / nonzero[rows])
                over = np.nan_to_num(c["overflow"] / finite[rows])
                if "total_blocks" in c:
                    filled = c["total_blocks"] - c["zero_blocks"]
                    clamped = tuple(
                        np.nan_to_num(c[side] / filled) for side in ("clamped_low", "clamped_high")
                    )
            found.append(FormatShares(name, rows, under, over, clamped))
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
        first = {"error": {}}
        for severity, limit in (
            ("error", thresholds.overflow_error),
            ("warning", thresholds.overflow_warning),
        ):
            if fs.format.saturates and severity == "error":
                continue  # a saturated value keeps its largest value (its block's)
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
    then = f"({percent(fs.over[last])} at step {int(numerics.steps[fs.rows[last]])})"
    who = f"{info.tensor_type} {info.name!r}"
    if fs.format.saturates:
        message = (
            f"{fs.format} saturates from step {step}: {who} rounds {percent(fs.over[i])} of "
            f"its finite values down to their block's largest element value {then}"
        )
    else:
        message = (
            f"{fs.format} overflows from step {step}: {who} loses {percent(fs.over[i])} of "
            f"its finite values to overflow {then}"
        )
    return Finding(
        numerics.run,
        step,
        "overflow",
        severity,
        info.tensor_type,
        info.name,
        float(fs.over[i]),
        message,
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
    (``tandv_tb.formats.estimate``)."""
    shares = [fs for fs in shares if not fs.format.scales_itself]
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


def clamp_findings(
    numerics: RunNumerics, shares: list[FormatShares], thresholds: Thresholds
) -> list[Finding]:
    """Per tensor and block format: the first step from which more than
    ``underflow_share`` of the tensor's non-empty blocks get a clamped scale at
    ``underflow_window`` consecutive recorded steps (``scale``, a warning).

    Where scales that clamp high lose nothing (``BlockFormat.high_clamps_lose``: nvfp4's
    clamp high only by float32 rounding), only its scales clamped low are findings."""
    found = []
    for fs in shares:
        if fs.clamped is None:
            continue
        low, high = fs.clamped
        if not fs.format.high_clamps_lose:
            high = np.zeros_like(high)
        share = low + high
        tensors = numerics.tensor[fs.rows]
        starts, _ = first_stretches(
            share > thresholds.underflow_share, tensors, thresholds.underflow_window
        )
        lowest, highest = fs.format.scale_exponents
        for i in starts.tolist():
            g = int(tensors[i])
            info, step = numerics.tensors[g], int(numerics.steps[fs.rows[i]])
            last = int(np.searchsorted(tensors, g, side="right")) - 1
            sides = [f"below 2^{lowest}" if low[i] else "", f"above 2^{highest}" if high[i] else ""]
            found.append(
                Finding(
                    numerics.run,
                    step,
                    "scale",
                    "warning",
                    info.tensor_type,
                    info.name,
                    float(share[i]),
                    f"{info.tensor_type} {info.name!r} in {fs.format}: {percent(share[i])} of "
                    f"its non-zero blocks need a scale {' and '.join(filter(None, sides))}, "
                    f"clamped to the scale's range, from step {step} ({percent(share[last])} "
                    f"at step {int(numerics.steps[fs.rows[last]])})",
                    format=fs.format,
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
