"""What a step computed from a tensor, kept for the same tensor while it is unchanged.

The same tensor often arrives twice in one step: a container module returns its last
child's output, two gradient hooks see one gradient. Its version counter
(``tensor._version``, which every in-place operation raises) tells whether it changed in
between. It is private (pinned by tests/project/test_private_api_pins.py): torch has no
public way to ask whether a tensor changed since it was read.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

import torch

Value = TypeVar("Value")


class TensorMemo(Generic[Value]):
    """``compute(tensor)`` once per tensor object and version, until ``clear``."""

    def __init__(self) -> None:
        # id(tensor) -> (a weak reference to it, its version, the value)
        self._seen: dict[int, tuple[weakref.ref, int, Value]] = {}

    def get(
        self, tensor: torch.Tensor, compute: Callable[[torch.Tensor], Value], reuse: bool = True
    ) -> Value:
        """``compute(tensor)``, or what it gave for this tensor at this version before;
        ``reuse=False`` computes afresh and keeps nothing (a tensor a compiled graph hands
        over, whose buffer inductor may rewrite unseen: ``Tracker._receive``)."""
        if not reuse:
            return compute(tensor)
        seen = self._seen.get(id(tensor))
        if seen is not None and seen[0]() is tensor and seen[1] == tensor._version:
            return seen[2]
        value = compute(tensor)
        self._seen[id(tensor)] = (weakref.ref(tensor), tensor._version, value)
        return value

    def clear(self) -> None:
        self._seen = {}
