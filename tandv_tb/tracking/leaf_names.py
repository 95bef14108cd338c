"""The names of the tensors in a module's output (or inputs): one rule for both trackers.

A single tensor keeps the module's name. The leaves of a tuple or list, nested ones
flattened depth-first, are ``name``, ``name.1``, ``name.2``, ... by position (a ``None`` or
other non-tensor keeps its number and is passed through: an LSTM's ``(out, (h, c))`` gives
``name``, ``name.1``, ``name.2``); the values of a dict are ``name.<key>``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping

IsLeaf = Callable[[object], bool]
LeafFn = Callable[[str, object], object]


def named_leaves(value: object, name: str, is_leaf: IsLeaf) -> Iterator[tuple[str, object]]:
    """``(name, leaf)`` for every leaf (``is_leaf``) in ``value``, in order."""
    found: list[tuple[str, object]] = []
    _walk(value, name, is_leaf, lambda leaf_name, x: found.append((leaf_name, x)), None)
    yield from found


def map_leaves(value: object, name: str, is_leaf: IsLeaf, fn: LeafFn) -> object:
    """``value`` rebuilt with every leaf ``x`` replaced by ``fn(its name, x)``."""
    return _walk(value, name, is_leaf, fn, True)


def _walk(value, name: str, is_leaf: IsLeaf, fn: LeafFn, rebuild: bool | None) -> object:
    """Calls ``fn`` on every leaf; with ``rebuild``, returns ``value`` rebuilt around the
    results (``None`` otherwise: reading names builds no containers)."""
    if is_leaf(value):
        return fn(name, value)
    if isinstance(value, Mapping):
        items = {
            key: _walk(item, f"{name}.{key}", is_leaf, fn, rebuild) for key, item in value.items()
        }
        return _rebuild_mapping(value, items) if rebuild else None
    if isinstance(value, (tuple, list)):
        return _walk_sequence(value, name, is_leaf, fn, rebuild, itertools.count())
    return value if rebuild else None


def _walk_sequence(sequence, name, is_leaf, fn, rebuild, counter) -> object:
    items = []
    for item in sequence:
        if isinstance(item, (tuple, list)):
            items.append(_walk_sequence(item, name, is_leaf, fn, rebuild, counter))
            continue
        index = next(counter)
        items.append(_walk(item, name if index == 0 else f"{name}.{index}", is_leaf, fn, rebuild))
    if not rebuild:
        return None
    if isinstance(sequence, tuple) and hasattr(sequence, "_fields"):  # a NamedTuple
        return type(sequence)(*items)
    return type(sequence)(items)


def _rebuild_mapping(original: Mapping, items: dict) -> Mapping:
    if type(original) is dict:
        return items
    try:
        return type(original)(items)
    except TypeError:  # a mapping type that cannot be built from a dict: leave it as it was
        return original
