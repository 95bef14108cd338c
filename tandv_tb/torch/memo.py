"""What a step computed from a tensor, kept for the same tensor while it is unchanged.

The same tensor often arrives twice in one step: a container module returns its last
child's output, two gradient hooks see one gradient. Its version counter
(``tensor._version``, which every in-place operation raises) tells whether it changed in
between. It is private (pinned by tests/project/test_private_api_pins.py): torch has no
public way to ask whether a tensor changed since it was read.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import torch

Value = TypeVar("Value")
_UNKNOWN = object()


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
        known = self._known(tensor)
        if known is not _UNKNOWN:
            return known
        value = compute(tensor)
        self._keep(tensor, value)
        return value

    def get_many(
        self,
        tensors: Sequence[torch.Tensor],
        compute_many: Callable[[list[torch.Tensor]], Sequence[Value]],
    ) -> list[Value]:
        """``get`` of many tensors, those not seen before given to one ``compute_many``."""
        values: list = [self._known(tensor) for tensor in tensors]
        missing = [i for i, value in enumerate(values) if value is _UNKNOWN]
        if missing:
            computed = compute_many([tensors[i] for i in missing])
            for i, value in zip(missing, computed):
                self._keep(tensors[i], value)
                values[i] = value
        return values

    def _keep(self, tensor: torch.Tensor, value: Value) -> None:
        self._seen[id(tensor)] = (weakref.ref(tensor), tensor._version, value)

    def _known(self, tensor: torch.Tensor) -> object:
        """What ``compute`` gave for this tensor at this version, or ``_UNKNOWN``."""
        seen = self._seen.get(id(tensor))
        if seen is not None and seen[0]() is tensor and seen[1] == tensor._version:
            return seen[2]
        return _UNKNOWN

    def clear(self) -> None:
        self._seen = {}
