"""The ``order`` of tracked tensors: where each sits in the model, stable across steps.

Module outputs (and inputs, and attached tensors) are ordered by first execution, in both
trackers; a gradient takes its value's place. Parameters known when tracking starts keep
the order they are given in (PyTorch's, by registration). Others (JAX's, seen in the
pytrees given to ``step()``) follow the first execution of the module owning them, then
their names in natural order (``Dense_2`` before ``Dense_10``): jax sorts dict keys, so
the pytrees themselves no longer tell the order the parameters were created in.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable

from tandv_tb.event_files.metadata import MODULE_CALL_TYPES, MODULE_INPUT_TYPES


def natural_key(name: str) -> tuple:
    """Sort key reading digit runs as numbers: ``layers.2`` < ``layers.10``."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.split(r"(\d+)", name)
        if part
    )


def _module_key(name: str, tensor_type: str) -> Hashable:
    """Outputs (and attached tensors) by name; inputs apart, placed where their module
    starts (before its children's outputs)."""
    return ("Input", name) if tensor_type in MODULE_INPUT_TYPES else name


class Orders:
    """Module outputs by first sight; parameters as given ahead, else by their module."""

    def __init__(self, parameters: Iterable[str] = ()) -> None:
        self._modules: dict[Hashable, int] = {}
        self._parameters: dict[str, int] = {}
        for name in parameters:
            self._parameters.setdefault(name, len(self._parameters))

    def module(self, name: str, tensor_type: str) -> int:
        """The order of a module-side tensor (``MODULE_CALL_TYPES``), by first sight; a
        tracker places a module's name when it runs, so that a gradient recorded without
        its value still takes the value's place."""
        return self._modules.setdefault(_module_key(name, tensor_type), len(self._modules))

    def of(self, tensors: Iterable[tuple[str, str]]) -> list[int]:
        """The order of each ``(name, tensor type)``, seen in the order given: module-side
        tensors first (their modules place the parameters), then parameters."""
        tensors = list(tensors)
        orders: list[int] = [0] * len(tensors)
        parameters = []
        for i, (name, tensor_type) in enumerate(tensors):
            if tensor_type in MODULE_CALL_TYPES:
                orders[i] = self.module(name, tensor_type)
            else:
                parameters.append(i)
        known = self._place_parameters(tensors[i][0] for i in parameters)
        for i in parameters:
            orders[i] = known[tensors[i][0]]
        return orders

    def _place_parameters(self, names: Iterable[str]) -> dict[str, int]:
        """The order of each parameter name; new names are placed after the known ones."""
        new = sorted({n for n in names if n not in self._parameters}, key=self._parameter_key)
        for name in new:
            self._parameters[name] = len(self._parameters)
        return self._parameters

    def _parameter_key(self, name: str) -> tuple:
        parts = name.split(".")
        for end in range(len(parts) - 1, 0, -1):
            owner = self._modules.get(".".join(parts[:end]))
            if owner is not None:
                return (0, owner, natural_key(name))
        return (1, 0, natural_key(name))
