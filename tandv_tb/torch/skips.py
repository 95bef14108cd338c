"""Tensors that cannot be tracked: why, and one warning per name and reason."""

from __future__ import annotations

import warnings

import torch


class UntrackableTensorWarning(UserWarning):
    """A tensor was skipped (tracking goes on without it)."""


def untrackable_reason(tensor: torch.Tensor) -> str | None:
    """Why ``tensor`` cannot be tracked, or ``None`` when it can."""
    if tensor.layout != torch.strided:
        return f"{tensor.layout} tensors are not tracked"
    if tensor.is_meta:
        return "meta tensors hold no values"
    if not tensor.is_floating_point():
        return f"{tensor.dtype} is not a float dtype"
    return None


class SkipLog:
    """Warns once per (name, tensor type, reason)."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str, str]] = set()

    def skip(self, name: str, tensor_type: str, reason: str) -> None:
        key = (name, tensor_type, reason)
        if key not in self._seen:
            self._seen.add(key)
            warnings.warn(
                f"tandv_tb: not tracking {tensor_type} {name!r}: {reason}",
                UntrackableTensorWarning,
                stacklevel=3,
            )
