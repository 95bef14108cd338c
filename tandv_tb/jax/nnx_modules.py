"""Flax NNX: module outputs, state pytrees and optimizer state of NNX objects.

NNX has no method interception, so while a tracked function runs (or is traced) the
``__call__`` of every module class in the model is wrapped, and restored afterwards.
Transforms (``nnx.jit``, ``nnx.grad``) call copies of the user's modules; a module not
seen before is taken as a root and its submodules are named by their path from it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterable, Iterator

from tandv_tb.jax import attaching, features
from tandv_tb.jax.collector import Collector

_lock = threading.Lock()
_patched: dict[type, tuple[object, int]] = {}  # class -> (original __call__, users)
_local = threading.local()


def nnx_module():
    """The ``flax.nnx`` module, or None where flax is not installed."""
    try:
        from flax import nnx
    except ImportError:
        return None
    return nnx


def is_nnx_object(value: object) -> bool:
    nnx = nnx_module()
    return nnx is not None and isinstance(value, features.nnx_object_type(nnx))


def state_tree(value: object, optimizer: bool = False) -> object:
    """The state pytree of an NNX module or optimizer; anything else as it is."""
    nnx = nnx_module()
    if nnx is None or not isinstance(value, features.nnx_object_type(nnx)):
        return value
    if optimizer and isinstance(value, nnx.Optimizer):
        return nnx.state(value, nnx.OptState)
    return nnx.state(value)


def module_types(root: object) -> dict[str, str]:
    """``{path: class name}`` for every module under an NNX module."""
    nnx = nnx_module()
    if nnx is None or not isinstance(root, nnx.Module):
        return {}
    return {_path_name(path, module): type(module).__name__ for path, module in _walk(root)}


def _walk(root: object):
    return features.nnx_iter_modules(nnx_module(), root)


def _path_name(path: tuple, module: object) -> str:
    return ".".join(str(part) for part in path) or type(module).__name__


class _Names:
    """Module instance -> name, by its path from the root it was found under."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._alive: list[object] = []  # keeps ids unique while the names are in use

    def add_root(self, root: object) -> None:
        if id(root) in self._names:
            return
        for path, module in _walk(root):
            if id(module) not in self._names:
                self._names[id(module)] = _path_name(path, module)
                self._alive.append(module)

    def __call__(self, module: object) -> str:
        if id(module) not in self._names:
            self.add_root(module)
        return self._names[id(module)]


class _Active:
    def __init__(self, collector: Collector, names: _Names) -> None:
        self.collector = collector
        self.names = names
        self.running: set[int] = set()


def _module_classes(roots: Iterable[object]) -> set[type]:
    nnx = nnx_module()
    classes = set()
    for root in roots:
        for _, module in _walk(root):
            for cls in type(module).__mro__:
                if "__call__" in cls.__dict__ and issubclass(cls, nnx.Module):
                    classes.add(cls)
    return classes


def _wrapped_call(original):
    @functools.wraps(original)
    def call(self, *args, **kwargs):
        active = getattr(_local, "active", None)
        if active is None or id(self) in active.running:  # not tracking, or super().__call__
            return original(self, *args, **kwargs)
        name = active.names(self)  # on entry: a root names its submodules before they run
        module_type = type(self).__name__
        collector = active.collector
        call = collector.call_begins(name, module_type, self, args, kwargs)
        args, kwargs = collector.module_inputs(name, module_type, args, kwargs)
        active.running.add(id(self))
        try:
            with attaching.module_scope(name):
                output = original(self, *args, **kwargs)
        finally:
            active.running.discard(id(self))
        output = collector.module_output(name, module_type, output)
        collector.call_ends(call, output)
        return output

    call.__tandv_original__ = original
    return call


def _patch(classes: set[type]) -> None:
    with _lock:
        for cls in classes:
            original, users = _patched.get(cls, (cls.__dict__["__call__"], 0))
            if users == 0:
                cls.__call__ = _wrapped_call(original)
            _patched[cls] = (original, users + 1)


def _unpatch(classes: set[type]) -> None:
    with _lock:
        for cls in classes:
            original, users = _patched[cls]
            if users == 1:
                cls.__call__ = original
                del _patched[cls]
            else:
                _patched[cls] = (original, users - 1)


def nnx_roots(values: Iterable[object]) -> list[object]:
    """The NNX modules among ``values`` (the arguments of a tracked call)."""
    nnx = nnx_module()
    if nnx is None:
        return []
    return [v for v in values if isinstance(v, nnx.Module)]


@contextlib.contextmanager
def intercepting(collector: Collector, roots: list[object]) -> Iterator[None]:
    """Record the output of every call of a module of ``roots``' classes in this context."""
    if not roots:
        yield
        return
    names = _Names()
    for root in roots:
        names.add_root(root)
    classes = _module_classes(roots)
    previous = getattr(_local, "active", None)
    _patch(classes)
    _local.active = _Active(collector, names)
    try:
        yield
    finally:
        _local.active = previous
        _unpatch(classes)
