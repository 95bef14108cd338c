"""A thread-safe least-recently-used map bounded by the total size of what it holds."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable


class LRU:
    """Values by key, the least recently used dropped first once their sizes (``size``)
    add up past ``budget`` (the newest one is kept whatever its size)."""

    def __init__(self, budget: int, size: Callable[[object], int]):
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._sizes: dict = {}
        self._total = 0
        self._budget = budget
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: Hashable):
        """The value under ``key``, or None."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value) -> None:
        size = self._size(value)
        with self._lock:
            if key in self._items:
                self._total -= self._sizes.pop(key)
                del self._items[key]
            self._items[key] = value
            self._sizes[key] = size
            self._total += size
            while self._total > self._budget and len(self._items) > 1:
                old, _ = self._items.popitem(last=False)
                self._total -= self._sizes.pop(old)
