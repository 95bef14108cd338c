"""``attach``: record any array inside a Flax module or a function run by ``intercept``.

While ``tracker.intercept`` runs a function (or traces it under ``jax.jit``), the collector
of that call and the stack of modules being run are kept per thread; ``attach`` names its
array after the innermost module and hands it to the collector. Outside ``intercept`` (and
on untracked steps, which run the user's own function) it returns its argument at once: under
``jax.jit`` it then leaves nothing in the compiled program.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import jax

from tandv_tb.jax.collector import Collector
from tandv_tb.jax.skips import Verdict, untrackable


class _State(threading.local):
    """This thread's collector and module stack (class defaults: reading them outside
    ``intercept`` costs no exception)."""

    collector: Collector | None = None
    scopes: list[str] | None = None


_local = _State()

#: The name of an array attached with an empty name outside any module.
EMPTY_NAME = "(empty name)"


def attach(x: jax.Array, name: str) -> jax.Array:
    """Record ``x`` (``Activation``) and, where it is differentiated, its cotangent
    (``Gradient``); returns ``x``.

    Call it inside a Flax module (linen or NNX) or any function run by
    ``tracker.intercept``, also under ``jax.jit``: ``h = attach(h, "pre_norm")``. Use what it
    returns: under differentiation it is an identity on ``x`` through which the gradient is
    seen. The name is ``<module path>.<name>`` inside a module (the path as module outputs
    are named), else ``name``. It is placed in the model's order where it runs. Outside a
    tracked ``intercept`` it does nothing. Non-arrays and integer arrays are skipped with one
    warning per name; ``attach`` never raises.
    """
    collector = _local.collector
    if collector is None:
        return x
    scopes = _local.scopes
    name = name if isinstance(name, str) else str(name)
    full_name = f"{scopes[-1]}.{name}" if scopes else (name or EMPTY_NAME)
    try:
        if not isinstance(x, jax.Array):
            reason = f"attach needs a jax.Array, got {type(x).__name__}"
            collector.config.skips.skip(full_name, "Activation", reason)
            return x
        verdict = untrackable(x, skip_scalars=False)
        if verdict is not Verdict.TRACK:
            reason = f"{x.dtype} is not a float dtype" if verdict is Verdict.SILENT else verdict
            collector.config.skips.skip(full_name, "Activation", reason)
            return x
        return collector.module_output(full_name, "", x)
    except Exception as error:  # attach never stops training
        collector.config.skips.skip(full_name, "Activation", f"{type(error).__name__}: {error}")
        return x


@contextlib.contextmanager
def collecting(collector: Collector) -> Iterator[None]:
    """Send ``attach`` calls of this thread to ``collector`` while the context runs."""
    previous = _local.collector, _local.scopes
    _local.collector, _local.scopes = collector, []
    try:
        yield
    finally:
        _local.collector, _local.scopes = previous


@contextlib.contextmanager
def module_scope(name: str) -> Iterator[None]:
    """Name what is attached in this context after the module ``name``."""
    scopes = _local.scopes
    if _local.collector is None or scopes is None:
        yield
        return
    scopes.append(name)
    try:
        yield
    finally:
        scopes.pop()
