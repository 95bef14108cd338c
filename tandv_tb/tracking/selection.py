"""What both trackers share: which names and steps are tracked (``include``/``exclude``,
``every``), one warning per skipped tensor, and the default logdir."""

from __future__ import annotations

import datetime
import os
import re
import socket
import warnings
from collections.abc import Iterable

Patterns = str | re.Pattern | Iterable[str | re.Pattern] | None


def _compile(patterns: Patterns, keyword: str) -> tuple[re.Pattern, ...]:
    if patterns is None:
        return ()
    if isinstance(patterns, (str, re.Pattern)):
        patterns = (patterns,)
    compiled = []
    for pattern in patterns:
        if not isinstance(pattern, (str, re.Pattern)):
            raise TypeError(
                f"{keyword} takes regular expressions (str or re.Pattern), "
                f"got {type(pattern).__name__}"
            )
        try:
            compiled.append(re.compile(pattern))
        except re.error as error:
            message = f"{keyword}: invalid regular expression {pattern!r}: {error}"
            raise ValueError(message) from None
    return tuple(compiled)


class Selection:
    """``include``/``exclude`` regular expressions, matched with ``re.search`` on names.

    A name is tracked when it matches some ``include`` pattern (or there is none) and no
    ``exclude`` pattern. Answers are cached per name.
    """

    def __init__(self, include: Patterns = None, exclude: Patterns = None) -> None:
        self._include = _compile(include, "include")
        self._exclude = _compile(exclude, "exclude")
        self._cache: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        answer = self._cache.get(name)
        if answer is None:
            included = not self._include or any(p.search(name) for p in self._include)
            answer = included and not any(p.search(name) for p in self._exclude)
            self._cache[name] = answer
        return answer


def check_every(every: object) -> int:
    """``every`` as a positive int, or a clear error."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be a positive integer, got {every!r}")
    return every


def is_tracked_step(step: int, every: int) -> bool:
    """Steps 0, every, 2 * every, ... are tracked."""
    return step % every == 0


class SkipLog:
    """Warns once per (name, tensor type, reason), with the tracker's warning category."""

    def __init__(self, category: type[Warning]) -> None:
        self._category = category
        self._seen: set[tuple[str, str, str]] = set()

    def skip(self, name: str, tensor_type: str, reason: str) -> None:
        key = (name, tensor_type, reason)
        if key not in self._seen:
            self._seen.add(key)
            warnings.warn(
                f"tandv_tb: not tracking {tensor_type} {name!r}: {reason}",
                self._category,
                stacklevel=4,
            )


def default_logdir() -> str:
    """``runs/<date>_<host>``, as ``SummaryWriter`` picks."""
    now = datetime.datetime.now().strftime("%b%d_%H-%M-%S")
    return os.path.join("runs", f"{now}_{socket.gethostname()}")
