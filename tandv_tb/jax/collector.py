"""What one call of an intercepted function records: module outputs and their cotangents.

A ``Collector`` belongs to one trace: the ``jax.jit`` trace of a tracked function, or the
eager evaluation of an un-jitted one. It computes statistics only of values of that trace
(checked with ``get_opaque_trace_state``); a module run inside a nested transformation
(``jax.lax.scan``, ``jax.checkpoint``, ``jax.vmap``, an inner ``jax.jit``) is skipped with
one warning, since values of an inner trace cannot leave it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.extend.core import get_opaque_trace_state

from tandv_tb.jax import kernels
from tandv_tb.jax.outputs import map_output
from tandv_tb.jax.probe import probe
from tandv_tb.jax.skips import Verdict, untrackable
from tandv_tb.stats.engine import Pending
from tandv_tb.tracking import SkipLog

NESTED = (
    "it runs inside a transformation nested in the tracked function (jax.lax.scan, "
    "jax.checkpoint/nn.remat, jax.vmap or an inner jax.jit), whose values cannot leave it; "
    "pass the jitted function itself to tracker.intercept"
)


@dataclasses.dataclass(frozen=True)
class Config:
    """The tracker's choices that decide what a collector records."""

    formats: tuple[str, ...]
    selected: Callable[[str], bool]
    gradients: bool
    skips: SkipLog


@dataclasses.dataclass(frozen=True)
class Slot:
    """One recorded value's place in a packed result."""

    name: str
    tensor_type: str
    module_type: str
    dtype: str
    formats: tuple[str, ...]
    n_counts: int
    n_moments: int


class Collector:
    """Statistics of the module outputs (``Activation``) and of their cotangents
    (``Gradient``) seen while one trace runs, in the order they were computed."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.entries: list[tuple[str, str, str, Pending]] = []
        self.module_types: dict[str, str] = {}
        self._state = get_opaque_trace_state()
        # One computation per array: a root module's output is often its last child's.
        self._computed: dict[int, tuple[jax.Array, Pending]] = {}

    def owns_current_trace(self) -> bool:
        return get_opaque_trace_state() == self._state

    def module_output(self, name: str, module_type: str, output: object) -> object:
        """Record the arrays of one module call's output; returns the output to use in its
        place (the same values, with a probe on each array when it is differentiated)."""
        self.module_types.setdefault(name, module_type)
        return map_output(output, name, functools.partial(self._output_array, module_type))

    def _output_array(self, module_type: str, name: str, x: jax.Array) -> jax.Array:
        if not self.config.selected(name):
            return x
        verdict = untrackable(x, skip_scalars=False)
        if verdict is not Verdict.TRACK:
            if verdict is not Verdict.SILENT:
                self.config.skips.skip(name, "Activation", verdict)
            return x
        if self.owns_current_trace():
            self._record(name, "Activation", module_type, x)
            return x
        on_backward = None
        if self.config.gradients:
            on_backward = functools.partial(self._record, name, "Gradient", module_type)
        probed, differentiated = probe(
            x, functools.partial(self._record, name, "Activation", module_type), on_backward
        )
        if not differentiated:
            self.config.skips.skip(name, "Activation", NESTED)
        return probed

    def _record(self, name: str, tensor_type: str, module_type: str, x: jax.Array) -> None:
        if not self.owns_current_trace():
            self.config.skips.skip(name, tensor_type, NESTED)
            return
        known = self._computed.get(id(x))
        if known is not None and known[0] is x:
            pending = known[1]
        elif isinstance(x, jax.core.Tracer):
            pending = kernels.in_program(x, self.config.formats)
        else:
            pending = kernels.start([x], self.config.formats)[0]
        self._computed[id(x)] = (x, pending)
        self.entries.append((name, tensor_type, module_type, pending))

    def pack(self) -> tuple[list[Slot], jax.Array, jax.Array]:
        """Every entry's vectors in one count vector and one moment vector (traced)."""
        slots, counts, moments = [], [], []
        for name, tensor_type, module_type, pending in self.entries:
            slots.append(
                Slot(
                    name,
                    tensor_type,
                    module_type,
                    pending.dtype,
                    pending.formats,
                    pending.counts.shape[0],
                    pending.moments.shape[0],
                )
            )
            counts.append(pending.counts)
            moments.append(pending.moments)
        int_dtype = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
        float_dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
        packed_counts = jnp.concatenate(counts) if counts else jnp.zeros(0, int_dtype)
        packed_moments = jnp.concatenate(moments) if moments else jnp.zeros(0, float_dtype)
        return slots, packed_counts, packed_moments
