"""Module interception for one call: flax linen methods and NNX module calls together."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
