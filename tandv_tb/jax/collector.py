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
from typing import Protocol

import jax
import jax.numpy as jnp

from tandv_tb.event_files.metadata import MODULE_INPUT_TYPES, MODULE_OUTPUT_TYPES
from tandv_tb.jax import array_stats
from tandv_tb.jax.features import get_opaque_trace_state
from tandv_tb.jax.probe import probe
from tandv_tb.jax.skips import Verdict, untrackable
from tandv_tb.stats.engine import Pending, Slot
from tandv_tb.tracking.leaf_names import map_leaves
from tandv_tb.tracking.skip_log import SkipLog


def _is_array(value: object) -> bool:
    return isinstance(value, jax.Array)


NESTED = (
    "it runs inside a transformation nested in the tracked function (jax.lax.scan, "
    "jax.checkpoint/nn.remat, jax.vmap or an inner jax.jit), whose values cannot leave it; "
    "pass the jitted function itself to tracker.intercept"
)


class CallObserver(Protocol):
    """What sees the module calls of a pass (the graph's recording, ``graph_capture``):
    told each call as it begins and ends; ``failed`` says why it stopped watching."""

    failed: str | None

    def begin(self, name: str, module_type: str, module: object, args, kwargs) -> object: ...

    def end(self, call: object, output: object) -> None: ...


@dataclasses.dataclass(frozen=True)
class Config:
    """The tracker's choices that decide what a collector records."""

    formats: tuple[str, ...]
    selected: Callable[[str], bool]
    gradients: bool
    skips: SkipLog
    inputs: bool = False


class Collector:
    """Statistics of the module outputs (``Activation``) and of their cotangents
    (``Gradient``) seen while one trace runs, in the order they were computed; with
    ``config.inputs`` also of module inputs (``Input``, ``Input_Gradient``)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.entries: list[tuple[str, str, str, Pending]] = []
        self._deferred: list[tuple[int, jax.Array]] = []  # (index in entries, input)
        self.module_types: dict[str, str] = {}
        self._state = get_opaque_trace_state()
        # One computation per array: a root module's output is often its last child's.
        self._computed: dict[int, tuple[jax.Array, Pending]] = {}
        #: The model's graph, where this pass records it (``graph_capture``).
        self.graph: CallObserver | None = None

    def call_begins(self, name: str, module_type: str, module: object, args, kwargs) -> object:
        """A module call begins, given ``args`` and ``kwargs`` (for the graph); what
        ``call_ends`` takes when it returns."""
        graph = self.graph
        if graph is None or graph.failed is not None:
            return None
        try:
            return graph.begin(name, module_type, module, args, kwargs)
        except Exception as error:  # recording the graph never stops training
            graph.failed = f"{type(error).__name__}: {error}"
            return None

    def call_ends(self, call: object, output: object) -> None:
        """The call ``call_begins`` began returned ``output`` (as its caller gets it)."""
        graph = self.graph
        if graph is None or graph.failed is not None or call is None:
            return
        try:
            graph.end(call, output)
        except Exception as error:
            graph.failed = f"{type(error).__name__}: {error}"

    def owns_current_trace(self) -> bool:
        return get_opaque_trace_state() == self._state

    def module_output(self, name: str, module_type: str, output: object) -> object:
        """Record the arrays of one module call's output; returns the output to use in its
        place (the same values, with a probe on each array when it is differentiated)."""
        self.module_types.setdefault(name, module_type)
        array = functools.partial(self._array, MODULE_OUTPUT_TYPES, module_type)
        return map_leaves(output, name, _is_array, array)

    def module_inputs(
        self, name: str, module_type: str, args: tuple, kwargs: dict
    ) -> tuple[tuple, dict]:
        """Record the arrays a module call is given (positional ones named as a tuple
        output's, keyword ones ``name.<keyword>``) when ``config.inputs``; returns the
        arguments to call it with. Non-float arrays are skipped without a word."""
        if not self.config.inputs:
            return args, kwargs
        array = functools.partial(self._array, MODULE_INPUT_TYPES, module_type)
        return map_leaves(args, name, _is_array, array), map_leaves(kwargs, name, _is_array, array)

    def _array(
        self, types: tuple[str, str], module_type: str, name: str, x: jax.Array
    ) -> jax.Array:
        value_type, gradient_type = types
        if not self.config.selected(name):
            return x
        verdict = untrackable(x, skip_scalars=False)
        if verdict is not Verdict.TRACK:
            if verdict is not Verdict.SILENT and types == MODULE_OUTPUT_TYPES:
                self.config.skips.skip(name, value_type, verdict)
            return x
        if self.owns_current_trace():
            self._record(name, value_type, module_type, x)
            return x
        on_backward = None
        if self.config.gradients:
            on_backward = functools.partial(self._record, name, gradient_type, module_type)
        probed, differentiated = probe(
            x, functools.partial(self._record, name, value_type, module_type), on_backward
        )
        if not differentiated and types == MODULE_INPUT_TYPES:
            self._defer(name, value_type, module_type, x)
        elif not differentiated:
            self.config.skips.skip(name, value_type, NESTED)
        return probed

    def _defer(self, name: str, tensor_type: str, module_type: str, x: jax.Array) -> None:
        """An input the enclosing differentiation does not differentiate (a data batch under
        ``jax.grad``) is a value of an outer trace: its statistics are computed by
        ``finish``, once that trace is current again, in the place it was seen."""
        self._deferred.append((len(self.entries), x))
        self.entries.append((name, tensor_type, module_type, None))

    def finish(self) -> None:
        """Compute what was deferred (call it when the function has run, in this trace); an
        array of a nested trace that has ended cannot be used and is skipped."""
        for index, x in self._deferred:
            name, tensor_type, module_type, _ = self.entries[index]
            try:
                pending = self._pending(x)
            except Exception:  # a value of an inner trace (jax.lax.scan, jax.checkpoint)
                self.config.skips.skip(name, tensor_type, NESTED)
                pending = None
            self.entries[index] = (name, tensor_type, module_type, pending)
        if self._deferred:
            self.entries = [entry for entry in self.entries if entry[3] is not None]
        self._deferred = []

    def _record(self, name: str, tensor_type: str, module_type: str, x: jax.Array) -> None:
        """Compute ``x``'s statistics, in the program being traced."""
        if not self.owns_current_trace():
            self.config.skips.skip(name, tensor_type, NESTED)
            return
        self.entries.append((name, tensor_type, module_type, self._pending(x)))

    def _pending(self, x: jax.Array) -> Pending:
        known = self._computed.get(id(x))
        if known is not None and known[0] is x:
            return known[1]
        if isinstance(x, jax.core.Tracer):
            pending = array_stats.in_program(x, self.config.formats)
        else:
            pending = array_stats.start([x], self.config.formats)[0]
        self._computed[id(x)] = (x, pending)
        return pending

    def pack(self) -> tuple[list[Slot], jax.Array, jax.Array]:
        """Every entry's vectors in one count vector and one moment vector (traced)."""
        slots, counts, moments = [], [], []
        for name, tensor_type, module_type, pending in self.entries:
            slots.append(
                Slot(
                    (name, tensor_type, module_type),
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
