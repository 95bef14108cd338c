"""Host syncs counted by torch's sync debug mode: the CUDA tests' and the GPU benchmark's
one way to check that a step makes none but the transfer at ``step()``."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch


def host_syncs(action: Callable[[], None]) -> int:
    """Synchronizing CUDA calls made by ``action()`` (0 where there is no CUDA device)."""
    if not torch.cuda.is_available():
        action()
        return 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            action()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("called a synchronizing CUDA operation" in str(w.message) for w in caught)
