"""Module interception for one call: flax linen methods and NNX module calls together."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import jax

from tandv_tb.jax import attaching, linen, nnx_modules
from tandv_tb.jax.collector import Collector


@contextlib.contextmanager
def intercepting(collector: Collector, args: tuple, kwargs: dict) -> Iterator[None]:
    """Record module outputs into ``collector`` while a tracked function runs: linen
    modules always, NNX modules of the classes found among its arguments, and what
    ``attach`` is given."""
    roots = nnx_modules.nnx_roots([*args, *kwargs.values()])
    with (
        attaching.collecting(collector),
        linen.intercepting(collector),
        nnx_modules.intercepting(collector, roots),
    ):
        yield
    collector.finish()


def refuse_traced(args: tuple, kwargs: dict) -> None:
    """Raise a ``RuntimeError`` saying where ``intercept`` goes when it is given arrays of a
    trace (called inside a function that ``jax.jit`` or another transformation traces):
    what it records must reach the host at ``step()``, which values of a trace cannot."""
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        raise RuntimeError(
            "tandv_tb: tracker.intercept was called inside a function that jax.jit (or "
            "another jax transformation) is tracing; call it outside, on the jitted "
            "function itself: tracker.intercept(train_step, params, opt_state, batch) with "
            "train_step = jax.jit(...); it compiles a tracked version of it once"
        )


def run_intercepted(collector: Collector, fn: Callable, args: tuple, kwargs: dict) -> object:
    """``fn(*args, **kwargs)`` with module outputs recorded into ``collector``; the
    model's graph it records (``collector.graph``) is told what ``fn`` returned."""
    with intercepting(collector, args, kwargs):
        outputs = fn(*args, **kwargs)
    if collector.graph is not None:
        collector.graph.returned(args, kwargs, outputs)
    return outputs
