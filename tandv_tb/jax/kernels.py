"""Starting the engine's statistics of jax arrays: in the traced program, on the host, or in
one compiled program for many device arrays.

Under explicit sharding (``jax.sharding.AxisType.Explicit``) the engine's histogram, a
scatter, cannot be partitioned by sharding-in-types; it runs under ``auto_axes`` there, so
XLA partitions it as usual and every device's part adds up to the global array's counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Sequence

import jax
from jax.sharding import PartitionSpec

from tandv_tb.formats import canonical_name
from tandv_tb.stats import engine
from tandv_tb.stats.engine import Pending


def _explicit_mesh(x: jax.Array):
    """The abstract mesh of ``x`` when some of its axes are explicit, else None."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    return mesh if getattr(mesh, "explicit_axes", ()) else None


def in_program(x: jax.Array, formats: tuple[str, ...]) -> Pending:
    """``engine.compute`` of a traced array, also under explicit sharding."""
    mesh = _explicit_mesh(x)
    if mesh is None:
        return engine.compute(x, formats)
    started: list[Pending] = []

    def run(value):
        started.append(engine.compute(value, formats))
        return started[-1].counts, started[-1].moments

    replicated = (PartitionSpec(), PartitionSpec())
    context = (
        jax.sharding.use_abstract_mesh(mesh)
        if jax.sharding.get_abstract_mesh().empty
        else contextlib.nullcontext()
    )
    with context:
        counts, moments = jax.sharding.auto_axes(run, out_sharding=replicated)(x)
    return dataclasses.replace(started[-1], counts=counts, moments=moments)


def _on_host(x: jax.Array) -> bool:
    """Whether ``x`` is all in this process's memory (a CPU array whose every shard is here;
    under ``jax.distributed`` a global array spans the CPUs of other processes too)."""
    return x.is_fully_addressable and all(device.platform == "cpu" for device in x.devices())


def start(arrays: Sequence[jax.Array], formats: tuple[str, ...]) -> list[Pending]:
    """Statistics of concrete arrays: host (CPU) arrays by the engine's CPU kernel, all
    others in one compiled program (one dispatch), left on their devices. A global array
    of several processes is described whole by that program (every process runs it)."""
    pending: list[Pending | None] = [None] * len(arrays)
    on_device = []
    for i, x in enumerate(arrays):
        if isinstance(x, jax.Array) and not _on_host(x):
            on_device.append(i)
        else:
            pending[i] = engine.compute(x, formats)
    if on_device:
        results = _device_program(formats)([arrays[i] for i in on_device])
        for i, (dtype, counts, moments) in zip(on_device, results):
            pending[i] = Pending(dtype, formats, counts=counts, moments=moments)
    return pending


@functools.cache
def _device_program(formats: tuple[str, ...]):
    def statistics(arrays):
        started = [in_program(x, formats) for x in arrays]
        return [(p.counts, p.moments) for p in started]

    program = jax.jit(statistics)

    def run(arrays):
        dtypes = [canonical_name(x.dtype) for x in arrays]
        return [(d, c, m) for d, (c, m) in zip(dtypes, program(arrays))]

    return run
