"""Tensors that cannot be tracked, and why."""

from __future__ import annotations

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
