"""Query-parameter parsing: every bad value becomes TensorBoard's ``InvalidArgumentError``
(HTTP 400) naming it."""

from __future__ import annotations

import re

from tensorboard.errors import InvalidArgumentError
from werkzeug.datastructures import MultiDict

#: Longest accepted text parameter: layer names are module paths, so a 1,000-character
#: module key inside containers makes a name longer than 1,000 characters.
MAX_TEXT = 10_000
MAX_STEP = 2**62


class Params:
    """Typed access to a request's query parameters."""

    def __init__(self, args: MultiDict):
        self._args = args

    def _values(self, name: str) -> list[str]:
        values = self._args.getlist(name)
        for value in values:
            if len(value) > MAX_TEXT:
                raise InvalidArgumentError(
                    f"parameter {name!r} is longer than {MAX_TEXT} characters"
                )
        return values

    def text(self, name: str, default: str | None = None, *, required: bool = True) -> str | None:
        """One string; 400 when missing (unless a default is given) or given twice."""
        values = self._values(name)
        if len(values) > 1:
            raise InvalidArgumentError(f"parameter {name!r} must be given once, got {len(values)}")
        if not values or values[0] == "":
            if default is None and required:
                raise InvalidArgumentError(f"missing parameter {name!r}")
            return default
        return values[0]

    def texts(self, name: str, *, required: bool = False) -> list[str]:
        """Every value of a repeatable parameter, in order, without repeats."""
        values = list(dict.fromkeys(v for v in self._values(name) if v != ""))
        if required and not values:
            raise InvalidArgumentError(f"missing parameter {name!r} (give it at least once)")
        return values

    def integer(
        self,
        name: str,
        default: int | None = None,
        *,
        low: int | None = None,
        high: int | None = None,
    ) -> int | None:
        """An integer in [low, high]; ``default`` when absent."""
        text = self.text(name, required=False)
        if text is None:
            return default
        try:
            value = int(text.strip())
        except ValueError:
            raise InvalidArgumentError(
                f"parameter {name!r} must be an integer, got {text!r}"
            ) from None
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"{low if low is not None else '-inf'}..{high if high is not None else 'inf'}"
            raise InvalidArgumentError(f"parameter {name!r} must be in {bounds}, got {value}")
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        """One of ``choices``; ``default`` when absent."""
        value = self.text(name, default)
        if value not in choices:
            raise InvalidArgumentError(
                f"parameter {name!r} must be one of {', '.join(choices)}; got {value!r}"
            )
        return value

    def regex(self, name: str) -> re.Pattern | None:
        """A compiled Python regular expression, or None when absent."""
        text = self.text(name, required=False)
        if text is None:
            return None
        try:
            return re.compile(text)
        except (re.error, RecursionError, OverflowError) as error:
            raise InvalidArgumentError(
                f"parameter {name!r} is not a valid regular expression: {error}"
            ) from None

    def step_window(self) -> tuple[int | None, int | None]:
        """``step_min`` and ``step_max`` (inclusive); 400 when min > max."""
        low = self.integer("step_min", low=0, high=MAX_STEP)
        high = self.integer("step_max", low=0, high=MAX_STEP)
        if low is not None and high is not None and low > high:
            raise InvalidArgumentError(f"step_min ({low}) is larger than step_max ({high})")
        return low, high
