"""The leaves of the pytrees given to ``step()`` that are tracked, with their names, worked
out once per layout of those pytrees.

Naming a leaf means walking its key path as text, and the optimizer state's names depend
on the model's: for a 280-leaf model that took about 9 ms a step, a third of the watch's
cost on an untracked step. The layout (tree structure, and each leaf's type,
shape and dtype, which decide whether it can be tracked) rarely changes in a training, so
the names and the choice are kept per layout and a step only flattens its pytrees.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from tandv_tb.jax.trees import NamedLeaf

#: ``(model, gradients or None, optimizer state or None)`` -> the tracked leaves, named,
#: in that order (the order of ``jax.tree_util.tree_flatten`` over the three).
Chooser = Callable[[object, object, object], list[tuple[int, NamedLeaf]]]

_MAX_LAYOUTS = 8  # a training alternating a few layouts keeps them all; more are rebuilt


def _layout(values: list) -> tuple:
    return tuple((type(v), getattr(v, "shape", None), getattr(v, "dtype", None)) for v in values)


class LeafPlans:
    """``chosen(model, grads, optimizer)``: ``choose``'s leaves, named once per layout."""

    def __init__(self, choose: Chooser) -> None:
        self._choose = choose
        self._plans: dict[tuple, list[tuple[int, str, str]]] = {}

    def chosen(self, model: object, grads: object, optimizer: object) -> list[NamedLeaf]:
        values, structure = jax.tree_util.tree_flatten((model, grads, optimizer))
        key = (structure, _layout(values))
        plan = self._plans.get(key)
        if plan is None:
            plan = [
                (i, leaf.name, leaf.tensor_type)
                for i, leaf in self._choose(model, grads, optimizer)
            ]
            if len(self._plans) >= _MAX_LAYOUTS:
                self._plans.clear()
            self._plans[key] = plan
        return [NamedLeaf(name, tensor_type, values[i]) for i, name, tensor_type in plan]
