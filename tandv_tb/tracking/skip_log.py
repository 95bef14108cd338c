"""What a tracker says of a tensor it cannot track: one warning per name, tensor type and
reason, in the tracker's own warning category."""

from __future__ import annotations

import warnings


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
