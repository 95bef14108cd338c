"""Timing shared by the overhead benchmarks (no framework imported here)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable


def wall_and_cpu(step: Callable[[], None]) -> tuple[float, float]:
    """Seconds of one step: wall time, and the process's CPU time (all its threads)."""
    start, cpu = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - start, time.process_time() - cpu


def pair_count(text: str) -> int:
    """``--pairs``: 0 (off) or at least 2, as quartiles of the pairs' ratios need two."""
    count = int(text)
    if count == 1 or count < 0:
        raise argparse.ArgumentTypeError(f"--pairs takes 0 or at least 2, got {count}")
    return count
