"""The options both ``track`` functions take, checked once (``TrackOptions``), and the
default logdir."""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
from collections.abc import Sequence

from tandv_tb.formats import check_formats
from tandv_tb.tracking.nonfinite_policy import Policy, check_policy
from tandv_tb.tracking.selection import Patterns, Selection


@dataclasses.dataclass(frozen=True)
class TrackOptions:
    """The options both ``track`` functions take (their docstrings say what each does).

    Made from ``track``'s keywords, whose defaults are the only ones; bad values raise a
    ``ValueError`` or ``TypeError`` naming the keyword. ``formats`` becomes a tuple of
    format values (``tandv_tb.formats.check_formats``) and ``include``/``exclude`` a
    ``Selection`` (``selected``).
    """

    logdir: str | os.PathLike | None
    writer: object
    every: int
    include: Patterns
    exclude: Patterns
    track_gradients: bool
    track_inputs: bool
    formats: Sequence[str]
    init_step: int
    watch_nonfinite: bool
    on_nonfinite: Policy
    selected: Selection = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        init_step = self.init_step
        if isinstance(init_step, bool) or not isinstance(init_step, int) or init_step < 0:
            raise ValueError(f"init_step must be an int >= 0, got {init_step!r}")
        if not isinstance(self.watch_nonfinite, bool):
            raise TypeError(f"watch_nonfinite must be a bool, got {self.watch_nonfinite!r}")
        check_policy(self.on_nonfinite, self.watch_nonfinite)
        check_every(self.every)
        try:
            formats = check_formats(self.formats)
        except (TypeError, ValueError) as error:
            raise type(error)(f"formats: {error}") from None
        object.__setattr__(self, "formats", formats)
        object.__setattr__(self, "selected", Selection(self.include, self.exclude))


def check_every(every: object) -> int:
    """``every`` as a positive int, or a clear error."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be a positive integer, got {every!r}")
    return every


def default_logdir() -> str:
    """``runs/<date>_<host>``, as ``SummaryWriter`` picks."""
    now = datetime.datetime.now().strftime("%b%d_%H-%M-%S")
    return os.path.join("runs", f"{now}_{socket.gethostname()}")
