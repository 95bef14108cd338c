"""Acting on NaN/Inf while training: a step's report (``StepReport``, what ``step()``
returns), the policy chosen at ``track(on_nonfinite=...)`` (``NonfinitePolicy``) and the
error it raises (``NonFiniteError``). Both trackers and both trainer callbacks use them.

The report is built from what the non-finite watch found (``nonfinite_record.merge``'s
entries, in execution order), so it costs no device-to-host read of its own. Only
``"raise"`` reads earlier: it must stop before the optimizer applies the step, so the
trackers read the step's counts at that point (one read a step, paid under that policy
alone).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence

from tandv_tb.event_files.metadata import execution_phase
from tandv_tb.event_files.nonfinite_record import NonfiniteEntry

#: The named policies; a callable taking a ``StepReport`` is the fourth kind.
POLICIES = ("record", "warn", "raise")
#: The direction of a step in which each execution phase's tensors are met.
_DIRECTIONS = ("forward", "backward", "backward", "optimizer", "optimizer")


def direction_of(tensor_type: str) -> str:
    """``"forward"`` (activations, inputs), ``"backward"`` (gradients, weight gradients) or
    ``"optimizer"`` (weights and optimizer state, as the optimizer left them); ``""`` for
    a tensor type of no known phase."""
    phase = execution_phase(tensor_type)
    return _DIRECTIONS[phase] if phase < len(_DIRECTIONS) else ""


@dataclasses.dataclass(frozen=True)
class StepReport:
    """What one training step saw: whether some tracked tensor held NaN or Inf and, if so,
    the first such tensor in execution order, with its counts.

    ``step`` is the step described (the one just ended: the watch reads its counts at the
    end of the step it checks). ``checked`` is False where nothing was looked at (an
    untracked step with ``watch_nonfinite=False``, or a tracker stopped by a lost rank).
    ``tensors`` counts the tensors that held NaN/Inf at that step.
    """

    step: int
    nonfinite: bool = False
    name: str = ""
    tensor_type: str = ""
    direction: str = ""
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    tensors: int = 0
    checked: bool = True

    @classmethod
    def of(cls, step: int, found: Sequence[NonfiniteEntry], checked: bool = True) -> StepReport:
        """The report of ``step`` from the watch's entries (execution order)."""
        if not found:
            return cls(step, checked=checked)
        first = found[0]
        return cls(
            step,
            True,
            first.name,
            first.tensor_type,
            direction_of(first.tensor_type),
            first.nan,
            first.posinf,
            first.neginf,
            len(found),
        )

    def __str__(self) -> str:
        if not self.nonfinite:
            return f"step {self.step}: " + ("no NaN/Inf" if self.checked else "not checked")
        counts = ", ".join(
            f"{count} {what}"
            for count, what in ((self.nan, "NaN"), (self.posinf, "+Inf"), (self.neginf, "-Inf"))
            if count
        )
        others = self.tensors - 1
        also = f"; {others} more tensor{'s' * (others != 1)} after it" if others else ""
        where = f" in the {self.direction} pass" if self.direction else ""
        return (
            f"step {self.step}: first NaN/Inf{where} in {self.tensor_type} {self.name!r} "
            f"({counts}){also}"
        )


class NonFiniteError(RuntimeError):
    """Training met NaN/Inf under ``on_nonfinite="raise"``; ``report`` says where. Raised
    before the optimizer applies the step, so the model and the optimizer state are those
    of the last good step."""

    def __init__(self, report: StepReport) -> None:
        super().__init__(f"tandv_tb stopped training at {report}")
        self.report = report


class NonFiniteWarning(RuntimeWarning):
    """Training met NaN/Inf under ``on_nonfinite="warn"`` (once per run)."""


Policy = str | Callable[[StepReport], object]


def check_policy(on_nonfinite: object, watch_nonfinite: bool) -> None:
    """A ``ValueError`` for a policy that is not one, or one that cannot work."""
    if not callable(on_nonfinite) and (
        not isinstance(on_nonfinite, str) or on_nonfinite not in POLICIES
    ):
        allowed = ", ".join(repr(p) for p in POLICIES)
        raise ValueError(
            f"on_nonfinite must be one of {allowed} or a callable taking the step's report, "
            f"got {on_nonfinite!r}"
        )
    if on_nonfinite != "record" and not watch_nonfinite:
        raise ValueError(
            f"on_nonfinite={on_nonfinite!r} needs watch_nonfinite=True: without the watch "
            "untracked steps are not checked for NaN/Inf, so there is nothing to act on"
        )


class NonfinitePolicy:
    """What a tracker does with a step's report (checked by ``check_policy``)."""

    def __init__(self, on_nonfinite: Policy) -> None:
        self._policy = on_nonfinite
        self._warned = False

    @property
    def stops_before_update(self) -> bool:
        """Whether the step's counts are read before the optimizer's update ("raise")."""
        return self._policy == "raise"

    @property
    def acts(self) -> bool:
        """Whether it does anything at all (not "record")."""
        return self._policy != "record"

    def act(self, report: StepReport) -> None:
        """Act on a report that holds NaN/Inf: warn once per run, raise
        ``NonFiniteError``, or call the user's function (whose errors propagate)."""
        if not report.nonfinite:
            return
        if self._policy == "warn":
            if not self._warned:
                self._warned = True
                warnings.warn(f"tandv_tb: {report}", NonFiniteWarning, stacklevel=4)
        elif self._policy == "raise":
            raise NonFiniteError(report)
        elif callable(self._policy):
            self._policy(report)
