"""The metrics of the heatmap and series routes: statistics, counts and derived values.

The under/overflow metrics take any format: an element format (exact where recorded,
else estimated from the bins, ``casts``) or a block-scaled one (exact, read from the
store where recorded; never estimated). ``snr_db`` and ``clamped_block_fraction`` take a
block-scaled format only."""

from __future__ import annotations

import dataclasses

import numpy as np
from tensorboard.errors import InvalidArgumentError

from tandv_tb import block_formats
from tandv_tb.disk.record import COUNTS, STATISTICS
from tandv_tb.plugin.casts import cast_counts
from tandv_tb.plugin.snr import block_sums, snr_db
from tandv_tb.store.series import LayerGrid, LayerSeries, Needs, StepColumns


@dataclasses.dataclass(frozen=True)
class Metric:
    """A per-step value of a layer; ``kind`` and ``scale`` guide the frontend's colours."""

    metric: str
    label: str
    kind: str  # statistic | log2 | fraction | count
    scale: str  # diverging | sequential
    needs_format: bool = False
    #: The format must be block-scaled (``tandv_tb.block_formats``).
    needs_block_format: bool = False

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


_LOG2_OF = ("std", "mean_abs", "max_abs", "min_abs_nonzero", "rm2", "rm4", "rm8")


def _all_metrics() -> dict[str, Metric]:
    found = [
        Metric(s, s, "statistic", "diverging" if s == "mean" else "sequential") for s in STATISTICS
    ]
    found += [Metric(c, c, "count", "sequential") for c in COUNTS]
    found += [
        Metric("inf_count", "Inf count", "count", "sequential"),
        Metric("nonfinite_count", "NaN + Inf count", "count", "sequential"),
    ]
    found += [Metric(f"log2_{s}", f"log2({s})", "log2", "diverging") for s in _LOG2_OF]
    found += [
        Metric("zero_fraction", "fraction of zeros", "fraction", "sequential"),
        Metric("nonfinite_fraction", "fraction of NaN + Inf", "fraction", "sequential"),
        Metric("underflow_count", "underflow count", "count", "sequential", True),
        Metric("overflow_count", "overflow count", "count", "sequential", True),
        Metric("underflow_fraction", "underflow fraction", "fraction", "sequential", True),
        Metric("overflow_fraction", "overflow fraction", "fraction", "sequential", True),
        Metric("snr_db", "SNR (dB)", "statistic", "sequential", True, True),
        Metric(
            "clamped_block_fraction",
            "fraction of blocks whose scale clamps",
            "fraction",
            "sequential",
            True,
            True,
        ),
    ]
    return {m.metric: m for m in found}


METRICS = _all_metrics()


def metric(name: str, format_name: str | None) -> Metric:
    """The metric called ``name``; 400 for an unknown one or a missing format."""
    found = METRICS.get(name)
    if found is None:
        raise InvalidArgumentError(f"unknown metric {name!r}; GET metrics lists them")
    if found.needs_format and format_name is None:
        raise InvalidArgumentError(f"metric {name!r} needs a 'format' parameter")
    if found.needs_block_format and not block_formats.is_block_format(format_name):
        raise InvalidArgumentError(
            f"metric {name!r} needs a block-scaled format ({', '.join(block_formats.NAMES)}, "
            f"or an MX one with {block_formats.RCEIL_SUFFIX!r}), got {format_name!r}"
        )
    return found


def needs(chosen: Metric, format_name: str | None) -> Needs:
    """The columns ``values`` reads for a metric."""
    name = chosen.metric
    if name in STATISTICS or name in COUNTS:
        return Needs((name,))
    if name.startswith("log2_"):
        return Needs((name[len("log2_") :],))
    infs = ("posinf_count", "neginf_count")
    if name == "inf_count":
        return Needs(infs)
    if name == "nonfinite_count":
        return Needs(("nan_count", *infs))
    if name == "zero_fraction":
        return Needs(("zero_count", "numel"))
    if name == "nonfinite_fraction":
        return Needs(("nan_count", *infs, "numel"))
    if block_formats.is_block_format(format_name):  # recorded or not at all: no bins
        return Needs(("numel",), format_name)
    return Needs(("numel", "dtype_code"), format_name, bins=True)


def values(series: LayerGrid, chosen: Metric, format_name: str | None) -> tuple[np.ndarray, bool]:
    """``(float64 values, exact)`` of a metric at every step of a ``LayerGrid``: [layers,
    S] (a layer's own: ``layer_values``)."""
    return _values_of(series, chosen, format_name)


def _values_of(
    series: StepColumns, chosen: Metric, format_name: str | None
) -> tuple[np.ndarray, bool]:
    """``(float64 values, exact)`` of a metric at every step of ``series``: [S] for one
    layer (``LayerSeries``), [layers, S] for a ``LayerGrid``."""
    name = chosen.metric
    if name in STATISTICS:
        return series.statistic(name), True
    if name in COUNTS:
        return series.count(name).astype(np.float64), True
    if name.startswith("log2_"):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log2(series.statistic(name[len("log2_") :])), True
    if name == "inf_count":
        return _infs(series).astype(np.float64), True
    if name == "nonfinite_count":
        return _nonfinite(series), True
    numel = series.count("numel")
    if name == "zero_fraction":
        return _fraction(series.count("zero_count"), numel), True
    if name == "nonfinite_fraction":
        return _fraction(_nonfinite(series), numel), True
    if name == "snr_db":
        return snr_db(*block_sums(series, format_name)[:2]), True
    if name == "clamped_block_fraction":
        clamped = series.column(f"clamped_low:{format_name}")
        clamped = clamped + series.column(f"clamped_high:{format_name}")
        return _fraction(clamped, series.column(f"total_blocks:{format_name}")), True
    casts = cast_counts(series, format_name)
    counts = casts.underflow if name.startswith("underflow") else casts.overflow
    if name.endswith("_count"):
        return counts.astype(np.float64), casts.exact
    return _fraction(counts, numel), casts.exact


def layer_values(
    series: LayerSeries, chosen: Metric, format_name: str | None
) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(steps, values, exact)`` of a metric for one layer: no step where it needs a
    block format that the layer did not record (nothing is estimated)."""
    if block_formats.is_block_format(format_name) and format_name not in series.formats:
        return series.steps[:0], np.zeros(0), True
    values, exact = _values_of(series, chosen, format_name)
    return series.steps, values, exact


def _infs(series: StepColumns) -> np.ndarray:
    return series.count("posinf_count") + series.count("neginf_count")


def _nonfinite(series: StepColumns) -> np.ndarray:
    return (_infs(series) + series.count("nan_count")).astype(np.float64)


def _fraction(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """``part / whole``, NaN where ``whole`` is 0; one array written, in the memory order
    of ``part`` (a grid's columns may be transposed views)."""
    out = np.full_like(part, np.nan, dtype=np.float64)
    return np.divide(part, whole, out=out, where=whole > 0)
