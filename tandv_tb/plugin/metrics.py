"""The metrics of the heatmap and series routes: statistics, counts and derived values.

Each metric is defined once, here, with what it reads (``Needs``) and how its values come
out of what was read. The under/overflow metrics take any format: an element format (exact
where recorded, else estimated from the bins, ``casts``) or a block-scaled one (exact, read
from the store where recorded; never estimated). A format says which metrics it offers
(``Format.metrics``): ``snr_db`` and ``clamped_block_fraction`` only a block-scaled one's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from tensorboard.errors import InvalidArgumentError

from tandv_tb.event_files.record import COUNTS, STATISTICS, snr_db
from tandv_tb.formats import Format
from tandv_tb.formats.blocks import NAMES_TEXT
from tandv_tb.plugin.casts import cast_counts
from tandv_tb.plugin.snr import block_sums
from tandv_tb.store.series import LayerGrid, LayerSeries, Needs, StepColumns

#: ``(float64 values, exact)`` of a metric at every step of some columns ([S] for one
#: layer, [layers, S] for a ``LayerGrid``), given the format asked for.
Values = tuple[np.ndarray, bool]


@dataclasses.dataclass(frozen=True)
class Metric:
    """A per-step value of a layer; ``kind`` and ``scale`` guide the frontend's colours.
    ``reads`` says what it reads for a format (or none), ``compute`` computes it."""

    metric: str
    label: str
    kind: str  # statistic | log2 | fraction | count
    scale: str  # diverging | sequential
    needs_format: bool = False
    #: Only a block-scaled format offers it (``tandv_tb.formats.blocks``).
    needs_block_format: bool = False
    reads: Callable[[Format | None], Needs] = dataclasses.field(default=None, compare=False)
    compute: Callable[[StepColumns, Format | None], Values] = dataclasses.field(
        default=None, compare=False
    )

    def as_json(self) -> dict:
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name not in ("reads", "compute")
        }


_LOG2_OF = ("std", "mean_abs", "max_abs", "min_abs_nonzero", "rm2", "rm4", "rm8")
_INFS = ("posinf_count", "neginf_count")


def _fraction(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """``part / whole``, NaN where ``whole`` is 0; one array written, in the memory order
    of ``part`` (a grid's columns may be transposed views)."""
    out = np.full_like(part, np.nan, dtype=np.float64)
    return np.divide(part, whole, out=out, where=whole > 0)


def _infs(series: StepColumns) -> np.ndarray:
    return series.count("posinf_count") + series.count("neginf_count")


def _nonfinite(series: StepColumns) -> np.ndarray:
    return (_infs(series) + series.count("nan_count")).astype(np.float64)


def _log2(values: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(values)


def _reading(*columns: str) -> Callable[[Format | None], Needs]:
    return lambda format: Needs(columns)


def _format_reads(format: Format) -> Needs:
    """A format's columns where recorded, and the bins to estimate it where it was not
    (where it can be)."""
    if format.estimable:
        return Needs(("numel", "dtype_code"), format, bins=True)
    return Needs(("numel",), format)


def _casts(under: bool, fraction: bool) -> Callable[[StepColumns, Format], Values]:
    def compute(series: StepColumns, format: Format) -> Values:
        casts = cast_counts(series, format)
        counts = casts.underflow if under else casts.overflow
        if fraction:
            return _fraction(counts, series.count("numel")), casts.exact
        return counts.astype(np.float64), casts.exact

    return compute


def _clamped_fraction(series: StepColumns, format: Format) -> Values:
    clamped = series.format_column(format, "clamped_low")
    clamped = clamped + series.format_column(format, "clamped_high")
    return _fraction(clamped, series.format_column(format, "total_blocks")), True


def _all_metrics() -> dict[str, Metric]:
    found = [
        Metric(
            s,
            s,
            "statistic",
            "diverging" if s == "mean" else "sequential",
            reads=_reading(s),
            compute=lambda series, f, s=s: (series.statistic(s), True),
        )  # fmt: skip
        for s in STATISTICS
    ]
    found += [
        Metric(
            c,
            c,
            "count",
            "sequential",
            reads=_reading(c),
            compute=lambda series, f, c=c: (series.count(c).astype(np.float64), True),
        )  # fmt: skip
        for c in COUNTS
    ]
    found += [
        Metric(
            "inf_count", "Inf count", "count", "sequential", reads=_reading(*_INFS),
            compute=lambda series, f: (_infs(series).astype(np.float64), True),
        ),
        Metric(
            "nonfinite_count", "NaN + Inf count", "count", "sequential",
            reads=_reading("nan_count", *_INFS),
            compute=lambda series, f: (_nonfinite(series), True),
        ),
    ]  # fmt: skip
    found += [
        Metric(
            f"log2_{s}",
            f"log2({s})",
            "log2",
            "diverging",
            reads=_reading(s),
            compute=lambda series, f, s=s: (_log2(series.statistic(s)), True),
        )  # fmt: skip
        for s in _LOG2_OF
    ]
    found += [
        Metric(
            "zero_fraction", "fraction of zeros", "fraction", "sequential",
            reads=_reading("zero_count", "numel"),
            compute=lambda series, f: (
                _fraction(series.count("zero_count"), series.count("numel")), True
            ),
        ),
        Metric(
            "nonfinite_fraction", "fraction of NaN + Inf", "fraction", "sequential",
            reads=_reading("nan_count", *_INFS, "numel"),
            compute=lambda series, f: (_fraction(_nonfinite(series), series.count("numel")), True),
        ),
    ]  # fmt: skip
    found += [
        Metric(
            f"{side}_{what}",
            f"{side} {what}",
            what,
            "sequential",
            True,
            reads=_format_reads,
            compute=_casts(side == "underflow", what == "fraction"),
        )  # fmt: skip
        for what in ("count", "fraction")
        for side in ("underflow", "overflow")
    ]
    found += [
        Metric(
            "snr_db", "SNR (dB)", "statistic", "sequential", True, True, reads=_format_reads,
            compute=lambda series, f: (snr_db(*block_sums(series, f)[:2]), True),
        ),
        Metric(
            "clamped_block_fraction", "fraction of blocks whose scale clamps", "fraction",
            "sequential", True, True, reads=_format_reads, compute=_clamped_fraction,
        ),
    ]  # fmt: skip
    return {m.metric: m for m in found}


METRICS = _all_metrics()


def metric(name: str, format: Format | None) -> Metric:
    """The metric called ``name``; 400 for an unknown one, a missing format or a format
    that does not offer it."""
    found = METRICS.get(name)
    if found is None:
        raise InvalidArgumentError(f"unknown metric {name!r}; GET metrics lists them")
    if found.needs_format and format is None:
        raise InvalidArgumentError(f"metric {name!r} needs a 'format' parameter")
    if found.needs_format and name not in format.metrics:
        raise InvalidArgumentError(
            f"metric {name!r} needs a block-scaled format ({NAMES_TEXT}), got {format!r}"
        )
    return found


def needs(chosen: Metric, format: Format | None) -> Needs:
    """The columns ``values`` reads for a metric."""
    return chosen.reads(format)


def values(series: LayerGrid, chosen: Metric, format: Format | None) -> Values:
    """``(float64 values, exact)`` of a metric at every step of a ``LayerGrid``: [layers,
    S] (a layer's own: ``layer_values``)."""
    return chosen.compute(series, format)


def layer_values(
    series: LayerSeries, chosen: Metric, format: Format | None
) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(steps, values, exact)`` of a metric for one layer: no step where it needs a
    format that cannot be estimated and that the layer did not record."""
    if format is not None and not format.estimable and format not in series.formats:
        return series.steps[:0], np.zeros(0), True
    values, exact = chosen.compute(series, format)
    return series.steps, values, exact
