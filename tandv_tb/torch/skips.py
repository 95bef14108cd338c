"""Tensors that cannot be tracked, and why."""

from __future__ import annotations

from tandv_tb.stats.inputs import untrackable_reason

__all__ = ["UntrackableTensorWarning", "untrackable_reason"]


class UntrackableTensorWarning(UserWarning):
    """A tensor was skipped (tracking goes on without it)."""
