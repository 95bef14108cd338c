"""Built responses, kept while the runs they were built from are unchanged."""

from __future__ import annotations

from collections.abc import Callable, Hashable

from tandv_tb.store.lru import LRU

#: Bytes of responses kept.
RESPONSE_BUDGET = 64 << 20


class ResponseCache:
    def __init__(self) -> None:
        self._results = LRU(RESPONSE_BUDGET, lambda item: _size(item[1]))

    def get(self, key: Hashable, fingerprint: Hashable, build: Callable[[], object]):
        """``build()``'s result, cached under ``key`` while ``fingerprint`` (the versions
        of the runs it reads) is unchanged."""
        item = self._results.get(key)
        if item is not None and item[0] == fingerprint:
            return item[1]
        result = build()
        self._results.put(key, (fingerprint, result))
        return result


def _size(result: object) -> int:
    if isinstance(result, (bytes, str)):
        return len(result)
    if isinstance(result, tuple):
        return sum(_size(part) for part in result)
    return 1024
