"""The one thread that builds the run routes' responses."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ResponseWorker:
    """Builds responses one at a time on one long-lived thread.

    TensorBoard's server starts a thread per request, and each thread's big arrays came
    from memory the kernel had to zero again: half of a new heatmap query's time in the
    server (``perf``, ``bench/RESULTS.md``). One long-lived thread reuses what its last
    response freed, and building one response at a time bounds what they hold."""

    def __init__(self) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "tandv_tb responses")

    def run(self, build: Callable[[], T]) -> T:
        """``build()``, run on the worker thread (its error raised here)."""
        return self._executor.submit(build).result()

    def close(self) -> None:
        self._executor.shutdown()
