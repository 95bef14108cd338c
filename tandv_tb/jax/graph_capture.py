"""The model's graph, recorded by the JAX tracker: the Flax module calls (linen and NNX) of
one tracked function, with their shapes, and the dataflow between them.

``GraphRecording`` belongs to one pass of a tracked function (its ``jax.jit`` trace, or an
eager call), like the ``Collector`` that carries it; the module interception tells it
when each call begins and ends (``Collector.call_begins``/``call_ends``), with the arrays
the caller gave and got. Each call is a node named as its numerics are (``Block_0.Dense_1``;
a root module by its class; ``Embed_0.attend`` for another method), with the shapes and
dtypes of the arrays it took and returned, and in ``extra`` its configuration (a linen
module's fields as ``extra_repr``) and its own parameters.

Edges: an array a call returned, given to a later call as it is (identity); under
``jax.jit``, also through the computation in between (a residual addition, a reshape): the
traced array's equation (the private ``DynamicJaxprTracer.parent`` and its
``in_tracers``, pinned by tests/project/test_private_api_pins.py; differentiated tracers
by their ``primal``) is followed back to the arrays some call returned. Eagerly, arrays
keep no such history: identity only. As in PyTorch, a call also gets an edge from each
call inside it whose output reaches its own output.

A function without modules gives one node: the function, with its arguments and results.
The tracker records the graph of the first function it intercepts on a tracked step, at
its first tracked pass (its trace, when jitted), and writes it once (``tracker.step``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence

import jax
import numpy as np

from tandv_tb.event_files.graph_record import ModelGraph, TensorSpec
from tandv_tb.jax import features, nnx_modules
from tandv_tb.tracking.graph_builder import CallGraph, warn_capture
from tandv_tb.tracking.step_buffer import Entry

_NONE: frozenset[str] = frozenset()
_SKIPPED_FIELDS = {"parent", "name"}  # a linen module's place, not its configuration


def arrays_in(value: object) -> list[jax.Array]:
    """The arrays in a call's arguments or result, as pytree leaves, in order."""
    return [x for x in jax.tree_util.tree_leaves(value) if isinstance(x, jax.Array)]


def _dtype(x: jax.Array) -> str:
    return np.dtype(x.dtype).name  # float32, bfloat16 (as ml_dtypes names it)


def _spec(x: jax.Array) -> TensorSpec:
    return TensorSpec(tuple(int(d) for d in x.shape), _dtype(x))


def _primal(x: object) -> object:
    """The tracer of the trace's own computation under differentiation's tracers."""
    for _ in range(8):
        inner = getattr(x, "primal", None)
        if inner is None:
            return x
        x = inner
    return x


def _extra(module: object) -> dict:
    """A linen module's configuration (its fields holding plain values: ``features=16,
    use_bias=True``) as ``extra_repr``, and the module's own parameters."""
    fields = []
    if dataclasses.is_dataclass(module):
        for field in dataclasses.fields(module):
            value = getattr(module, field.name, None)
            if field.repr and field.name not in _SKIPPED_FIELDS and _plain(value):
                fields.append(f"{field.name}={value!r}")
    return {"extra_repr": ", ".join(fields), "parameters": list(_own_parameters(module))}


def _plain(value: object) -> bool:
    """A value worth showing: a number, a string or a tuple of them (not None, a function,
    a dtype or an initializer)."""
    if isinstance(value, (tuple, list)):
        return len(value) <= 8 and all(_plain(v) for v in value)
    return isinstance(value, (bool, int, float, str)) and len(repr(value)) <= 40


def _own_parameters(module: object) -> Iterator[dict]:
    nnx = nnx_modules.nnx_module()
    if nnx is not None and isinstance(module, nnx.Module):
        params = {
            k: features.nnx_variable_value(v)
            for k, v in vars(module).items()
            if isinstance(v, nnx.Param)
        }
    else:  # linen: the module's scope, its children's parameters nested in it
        try:
            params = module.variables.get("params", {})
        except Exception:  # a linen module without a scope
            params = {}
    for name, value in params.items():
        if isinstance(value, jax.Array):
            shape = [int(d) for d in value.shape]
            yield {"name": str(name), "shape": shape, "dtype": _dtype(value)}


class GraphRecording:
    """The graph of one pass of a tracked function (see the module's doc)."""

    def __init__(self, function_name: str) -> None:
        self._function = function_name
        self._calls = CallGraph()
        self._made_by: dict[int, tuple[object, str]] = {}  # id(array) -> (array, call)
        self._memo: dict[int, tuple[object, frozenset[str]]] = {}
        self._extras: dict[int, dict] = {}
        self._specs: tuple[list, list] | None = None  # the function's, for a plain one
        #: Why recording stopped (an error, caught: the training goes on), or None.
        self.failed: str | None = None

    def begin(self, name: str, module_type: str, module: object, args, kwargs) -> str:
        inputs = arrays_in((args, kwargs))
        extra = self._extras.get(id(module))
        if extra is None:
            extra = self._extras[id(module)] = _extra(module)
        call = self._calls.begin(name, module_type, map(_spec, inputs), extra)
        for x in inputs:
            for source in self._sources(x):
                self._calls.edge(source, call)
        return call

    def end(self, call: str, output: object) -> None:
        outputs = arrays_in(output)
        self._calls.end(call, map(_spec, outputs))
        for x in outputs:
            for source in self._reaching(x, call):
                self._calls.edge(source, call)
        for x in outputs:
            for array in (x, _primal(x)):
                known = self._made_by.get(id(array))
                if known is None or not self._calls.inside(known[1], call):
                    self._made_by[id(array)] = (array, call)

    def returned(self, args: tuple, kwargs: Mapping, outputs: object) -> None:
        """The function returned (what a graph of it alone shows, if it called no module)."""
        self._specs = ([_spec(x) for x in arrays_in((args, kwargs))], arrays_in(outputs))

    def graph(self) -> ModelGraph | None:
        """The graph (None before the function returned); forgets the arrays it held."""
        self._made_by, self._memo = {}, {}
        if len(self._calls) == 0 and self._specs is not None:
            inputs, outputs = self._specs
            call = self._calls.begin(self._function, "function", inputs)
            self._calls.end(call, map(_spec, outputs))
        return self._calls.graph() if len(self._calls) else None

    # -- sources -------------------------------------------------------------------------
    def _made(self, x: object) -> str | None:
        known = self._made_by.get(id(x))
        return known[1] if known is not None and known[0] is x else None

    def _sources(self, x: object) -> frozenset[str]:
        """The calls ``x`` was returned by, or (traced) computed from, the nearest."""
        for candidate in (x, _primal(x)):
            made = self._made(candidate)
            if made is not None:
                return frozenset((made,))
        return self._walk(_primal(x))

    def _reaching(self, x: object, call: str) -> Iterable[str]:
        """The calls whose outputs reach ``x``, an output of ``call``, inside it."""
        made = self._made(x) or self._made(_primal(x))
        if made is not None:
            return (made,)
        parent = getattr(_primal(x), "parent", None)
        found: set[str] = set()
        for tracer in getattr(parent, "in_tracers", ()):
            found.update(self._sources(tracer))
        return found

    def _walk(self, start: object) -> frozenset[str]:
        """Back along traced equations to arrays some call returned (memoized, iterative)."""
        memo = self._memo
        stack: list[tuple[object, bool]] = [(start, False)]
        while stack:
            tracer, expanded = stack.pop()
            if id(tracer) in memo:
                continue
            inputs = list(getattr(getattr(tracer, "parent", None), "in_tracers", ()))
            if not expanded:
                stack.append((tracer, True))
                stack.extend((t, False) for t in inputs if self._made(t) is None)
                continue
            found: set[str] = set()
            for t in inputs:
                made = self._made(t)
                found.update((made,) if made is not None else memo[id(t)][1])
            memo[id(tracer)] = (tracer, frozenset(found) if found else _NONE)
        return memo[id(start)][1]


class FunctionGraph:
    """Which pass records the graph: of the first function intercepted on a tracked step,
    its first tracked pass that records one; then it is written once (``end_step``)."""

    def __init__(self) -> None:
        self._function: object = None
        self._done = False
        self._graph: ModelGraph | None = None

    def recording_for(self, function: object) -> GraphRecording | None:
        """A recording for a tracked pass of ``function`` (the Python function a jitted
        one wraps), or None where none is wanted."""
        if self._done:
            return None
        if self._function is None:
            self._function = function
        if function is not self._function:
            return None
        return GraphRecording(getattr(function, "__name__", type(function).__name__))

    def recorded(self, recording: GraphRecording) -> None:
        """A pass ended (its function returned): keep its graph, or say why there is none."""
        if self._done:
            return
        if recording.failed is not None:
            self._done = True
            warn_capture(f"the model's graph is not recorded ({recording.failed})", 4)
            return
        graph = recording.graph()
        if graph is not None:
            self._graph, self._done = graph, True

    def end_step(self, entries: Sequence[Entry]) -> ModelGraph | None:
        """A tracked step ends: the graph recorded and not yet written."""
        graph, self._graph = self._graph, None
        return graph
