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

from tandv_tb.stats import engine, jax_kernel
from tandv_tb.stats.engine import Pending

# ``Pending`` as a jax pytree, its device vectors the leaves: the jitted program of
# ``start`` returns the engine's own results.
jax.tree_util.register_dataclass(
    Pending,
    data_fields=["counts", "moments"],
    meta_fields=["dtype", "formats", "ready", "packed", "offset"],
)


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


def start(arrays: Sequence[jax.Array], formats: tuple[str, ...]) -> list[Pending]:
    """Statistics of concrete arrays: those ``jax_kernel`` gives the array kernel in one
    compiled program (one dispatch), left on their devices, the others by the engine (host
    arrays by its CPU kernel). A global array of several processes is described whole by
    that program (every process runs it)."""
    pending: list[Pending | None] = [None] * len(arrays)
    on_device = []
    for i, x in enumerate(arrays):
        if isinstance(x, jax.Array) and jax_kernel(x) == "array":
            on_device.append(i)
        else:
            pending[i] = engine.compute(x, formats)
    if on_device:
        results = _device_program(formats)([arrays[i] for i in on_device])
        for i, started in zip(on_device, results):
            pending[i] = started
    return pending


@functools.cache
def _device_program(formats: tuple[str, ...]):
    """One jitted program giving the engine's ``Pending`` of every array it is given."""
    return jax.jit(lambda arrays: [in_program(x, formats) for x in arrays])
