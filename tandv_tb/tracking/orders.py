"""The ``order`` of tracked tensors: where each sits in the model, stable across steps.

Module outputs (and inputs, and attached tensors) are ordered by first execution, in both
trackers. PyTorch numbers parameters by registration; in JAX (``parameters``) they follow
the first execution of the module owning them, then their names in natural order
(``Dense_2`` before ``Dense_10``): jax sorts dict keys, so the pytrees themselves no longer
tell the order the parameters were created in.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable


def natural_key(name: str) -> tuple:
    """Sort key reading digit runs as numbers: ``layers.2`` < ``layers.10``."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.split(r"(\d+)", name)
        if part
    )


class Orders:
    """Module outputs by first sight; parameters by their module, assigned at first sight."""

    def __init__(self) -> None:
        self._modules: dict[Hashable, int] = {}
        self._parameters: dict[str, int] = {}

    def module(self, key: Hashable) -> int:
        """The order of a module output's name (or of another key placed among them: an
        input's ``("Input", name)``), by first sight."""
        return self._modules.setdefault(key, len(self._modules))

    def parameters(self, names: Iterable[str]) -> dict[str, int]:
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
