"""Which names are tracked: ``include``/``exclude`` as one ``Selection``."""

from __future__ import annotations

import re
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
