"""What every kind of finding shares: the ``Finding`` row and the thresholds (the
execution order of tensors is ``tandv_tb.event_files.metadata.execution_key``)."""

from __future__ import annotations

import dataclasses
import math

from tandv_tb.event_files.record import STATISTICS
from tandv_tb.formats import Format

#: The columns of a finding, in the order of ``tandv_tb.findings``' DataFrame.
COLUMNS = ("run", "step", "kind", "severity", "tensor_type", "name", "value", "message")
#: The columns of a grouped finding: a finding's, and how many tensors share it.
GROUP_COLUMNS = (*COLUMNS, "tensors")
#: Severities, most severe first; ``--fail-on`` compares by this rank.
SEVERITIES = ("error", "warning", "info")
#: Every kind of finding (docs/contract.md lists them; a ``Finding`` of another is refused).
KINDS = (
    "nonfinite",
    "overflow",
    "underflow",
    "scale",
    "drift",
    "dead",
    "loss_spike",
    "divergence",
)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing that went wrong (or is worth knowing) in a run, at a step: a row of
    ``tandv_tb.findings(..., grouped=False)``.

    The fields after ``message`` are not columns of the DataFrame; they serve grouping,
    headlines and the plugin's route."""

    run: str
    step: int
    kind: str
    severity: str
    tensor_type: str = ""
    name: str = ""
    value: float = math.nan
    message: str = ""
    #: The second run of a ``divergence``.
    other_run: str = ""
    #: The recorded format of an ``overflow``, ``underflow`` or ``scale`` (a ``Format``).
    format: Format | str = ""
    #: The metric that shows it, where the kind alone does not say: the statistic that
    #: jumped (``drift``), the metric compared (``divergence``).
    metric: str = ""
    #: How many tensors it stands for: every tensor with NaN/Inf at a ``nonfinite``'s step
    #: (the first of them is named); 1 otherwise (one tensor, or the run's loss).
    tensors: int = 1
    #: A ``scale``: the estimated share of values still lost at the suggested scale.
    still_lost: float = math.nan

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind of finding {self.kind!r}: expected one of {KINDS}")

    def row(self) -> dict:
        """The public columns as a dict (JSON-ready except for a NaN ``value``)."""
        return {column: getattr(self, column) for column in COLUMNS}


def scales_itself(format: Format | str) -> bool:
    """Whether a finding's format (a ``Format``, or "" for none) picks its own scales: a
    block-scaled one."""
    return bool(format) and format.scales_itself


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


def sort_key(finding) -> tuple:
    """By run, then step; at one step the most severe first (a ``Finding`` or a group)."""
    return (finding.run, finding.step, severity_rank(finding.severity), finding.kind)


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Every threshold of the findings, with its default (``tandv_tb.findings`` takes each as
    a keyword). Shares are fractions (0.05 = 5%); jumps are in binades (log2 units)."""

    #: ``overflow`` is an error where more than this share of a tensor's finite values
    #: overflows in a recorded format.
    overflow_error: float = 1e-3
    #: ``overflow`` is a warning above this share (0: any overflowing value).
    overflow_warning: float = 0.0
    #: ``underflow`` where more than this share of a tensor's finite non-zero values becomes
    #: 0 in a recorded format.
    underflow_share: float = 0.05
    #: ... at this many consecutive recorded steps (one step of a tiny tensor is noise).
    underflow_window: int = 3
    #: ``scale`` estimates the loss over at most this many recorded steps of the tensor,
    #: evenly spread from its first under/overflowing step (each one's exponent histogram).
    scale_steps: int = 32
    #: ``drift``: a step-to-step change of log2(max_abs) or log2(rm2) that is more than
    #: ``drift_z`` robust deviations (1.4826 x the median absolute deviation) from the
    #: tensor's median change ...
    drift_z: float = 8.0
    #: ... and at least this many binades (2: a factor of 4) ...
    drift_min_binades: float = 2.0
    #: ... in a tensor with at least this many step-to-step changes recorded before it.
    drift_min_history: int = 8
    #: ``dead``: every value 0 over at least this many consecutive recorded steps.
    dead_window: int = 5
    #: ``loss_spike``: the loss rises more than ``loss_spike_z`` robust deviations above the
    #: median of its previous ``loss_window`` values ...
    loss_spike_z: float = 6.0
    #: ... and by more than this share of that median (0.25: +25%).
    loss_spike_rise: float = 0.25
    #: The number of previous loss values a spike is measured against.
    loss_window: int = 20
    #: A spike is linked to the first drift within this many steps before it.
    loss_link_steps: int = 10
    #: ``divergence``: the metric compared between runs (a statistic, such as ``rm2``, or
    #: ``log2_`` and a statistic) ...
    divergence_metric: str = "log2_rm2"
    #: ... and the absolute difference that counts as parting (0.5 binade for log2 metrics).
    divergence_threshold: float = 0.5

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "str":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{field.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{field.name} must be a finite number >= 0, got {value!r}")
            if field.type == "int" and (value != int(value) or value < 1):
                raise ValueError(f"{field.name} must be an integer >= 1, got {value!r}")
        check_metric(self.divergence_metric)


def check_metric(metric: str) -> str:
    """``metric`` itself if it names a statistic or ``log2_<statistic>``, else ValueError."""
    if metric.removeprefix("log2_") not in STATISTICS:
        known = ", ".join([*STATISTICS, *(f"log2_{s}" for s in STATISTICS)])
        raise ValueError(f"unknown divergence metric {metric!r}; one of: {known}")
    return metric


def metric_label(metric: str) -> str:
    """A metric as a message names it: ``log2(rm2)`` for ``log2_rm2``."""
    return f"log2({metric[5:]})" if metric.startswith("log2_") else metric


def percent(share: float) -> str:
    """A share as a short percentage (``37%``, ``0.4%``, ``0.0012%``)."""
    if share == 0:
        return "0%"
    value = 100 * share
    return f"{value:.2g}%" if value < 10 else f"{value:.0f}%"
