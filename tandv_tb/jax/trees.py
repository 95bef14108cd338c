"""Names of the arrays in weight, gradient and optimizer-state pytrees.

A weight's name is its path without the ``params`` collection
and without NNX's trailing ``.value``: ``params/Block_0/Dense_0/kernel`` is
``Block_0.Dense_0.kernel``. An optimizer-state array is named after the parameter whose
path ends its own path, and typed by the state entry holding it: Adam's
``[0].mu['params']['Dense_0']['kernel']`` is ``Dense_0.kernel`` of type
``Optimiser_State.mu``, inside ``chain``, ``inject_hyperparams``, ``MultiSteps`` or masks
alike. Where two entries share a key (two Adams in one chain) the key is qualified by the
path before it (``Optimiser_State.1.0.mu``).
"""

from __future__ import annotations

import dataclasses

import jax
from jax.tree_util import DictKey, FlattenedIndexKey, GetAttrKey, SequenceKey

from tandv_tb.event_files.metadata import OPTIMISER_STATE_PREFIX

Path = tuple[object, ...]  # jax key entries


@dataclasses.dataclass(frozen=True)
class NamedLeaf:
    name: str
    tensor_type: str
    value: object


def leaves_with_paths(tree: object) -> list[tuple[Path, object]]:
    """``(key path, leaf)`` for every leaf of a pytree."""
    return jax.tree_util.tree_flatten_with_path(tree)[0]


def _text(key: object) -> str:
    if isinstance(key, DictKey):
        return str(key.key)
    if isinstance(key, SequenceKey):
        return str(key.idx)
    if isinstance(key, GetAttrKey):
        return key.name
    if isinstance(key, FlattenedIndexKey):
        return str(key.key)
    return str(key)


def parts(path: Path) -> tuple[str, ...]:
    """A key path as text, without NNX's trailing ``.value`` (also of boxed linen params)."""
    if path and isinstance(path[-1], GetAttrKey) and path[-1].name == "value":
        path = path[:-1]
    return tuple(_text(key) for key in path)


def _without_collection(texts: tuple[str, ...]) -> tuple[str, ...]:
    return texts[1:] if texts[:1] == ("params",) and len(texts) > 1 else texts


def weight_leaves(tree: object, tensor_type: str) -> list[NamedLeaf]:
    """Every leaf of a model-state (or gradient) pytree, named."""
    return [
        NamedLeaf(".".join(_without_collection(parts(path))), tensor_type, value)
        for path, value in leaves_with_paths(tree)
    ]


def optimizer_leaves(tree: object, parameters: set[str]) -> list[NamedLeaf]:
    """Every leaf of an optimizer-state pytree, named by the parameter (of ``parameters``)
    it belongs to; a leaf matching none is named by its path after its innermost state
    field."""
    found = []  # (state path before the key, key, name, value)
    for path, value in leaves_with_paths(tree):
        texts = parts(path)
        split = _parameter_suffix(texts, parameters) or _after_field(path, texts)
        prefix, key = (texts[: split - 1], texts[split - 1]) if split else ((), "state")
        name = ".".join(_without_collection(texts[split:])) or key
        found.append((prefix, key, name, value))
    prefixes: dict[tuple[str, str], set] = {}
    for prefix, key, name, _ in found:
        prefixes.setdefault((key, name), set()).add(prefix)
    leaves = []
    for prefix, key, name, value in found:
        shared = len(prefixes[key, name]) > 1
        full = ".".join((*prefix, key)) if shared else key
        leaves.append(NamedLeaf(name, f"{OPTIMISER_STATE_PREFIX}{full}", value))
    return leaves


def _parameter_suffix(texts: tuple[str, ...], parameters: set[str]) -> int | None:
    """Where the longest ending of ``texts`` that names a parameter starts (not at 0)."""
    for start in range(1, len(texts)):
        if ".".join(_without_collection(texts[start:])) in parameters:
            return start
    return None


def _after_field(path: Path, texts: tuple[str, ...]) -> int:
    """Just after the innermost attribute (an optax state field) of the path, or 0."""
    for position in range(len(texts) - 1, -1, -1):
        if isinstance(path[position], GetAttrKey):
            return position + 1
    return 0
