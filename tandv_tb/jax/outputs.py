"""Names of the arrays in a module's output, and the output rebuilt around them.

A single array keeps the module's name. The leaves of a tuple or list, nested ones flattened
depth-first, are ``name``, ``name.1``, ``name.2``, ... by position (a ``None`` keeps its
number); the values of a dict are ``name.<key>``. Other values are passed through untouched.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping

import jax

ArrayFn = Callable[[str, jax.Array], jax.Array]


def map_output(output: object, name: str, fn: ArrayFn) -> object:
    """``output`` with every array ``x`` in it replaced by ``fn(its name, x)``."""
    if isinstance(output, jax.Array):
        return fn(name, output)
    if isinstance(output, Mapping):
        items = {key: map_output(value, f"{name}.{key}", fn) for key, value in output.items()}
        return _rebuild_mapping(output, items)
    if isinstance(output, (tuple, list)):
        return _map_sequence(output, name, fn, itertools.count())
    return output


def output_names(output: object, name: str) -> Iterator[tuple[str, jax.Array]]:
    """``(name, array)`` for every array in ``output``, named as ``map_output`` names them."""
    found: list[tuple[str, jax.Array]] = []

    def keep(leaf_name: str, x: jax.Array) -> jax.Array:
        found.append((leaf_name, x))
        return x

    map_output(output, name, keep)
    yield from found


def _map_sequence(sequence: tuple | list, name: str, fn: ArrayFn, counter) -> tuple | list:
    items = []
    for item in sequence:
        if isinstance(item, (tuple, list)):
            items.append(_map_sequence(item, name, fn, counter))
            continue
        index = next(counter)
        items.append(map_output(item, name if index == 0 else f"{name}.{index}", fn))
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
