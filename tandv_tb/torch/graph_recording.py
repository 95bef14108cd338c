"""One forward pass of a PyTorch model as a graph: its module calls and the dataflow between
them (``Recording``), told by forward pre-hooks (``begin``) and forward hooks (``end``).

Each call is a node with the shapes and dtypes of the tensors it was given and returned
(tensors in tuples, lists, dicts and dataclasses, depth first; other values left out), its
module's ``extra_repr`` and its own parameters. Edges come from what the tensors were
computed from:

- into a call: each tensor it is given is traced back to the calls that returned what it
  was computed from. Through the autograd graph: from the tensor's ``grad_fn`` back along
  ``next_functions`` to the first nodes that made some call's output, so that functional
  code in between (a residual addition, a reshape, a view, an in-place update) is crossed.
  A tensor autograd does not follow (integer tensors, ``torch.no_grad``) by identity: the
  tensor a call returned, or a view of it (its ``_base``).
- out of a call: what its own output was computed from, traced the same way, gives an
  edge to it from each call inside it that feeds its output (and from the calls outside
  it whose output reaches its output, a residual path across it: already an edge into
  it). The Graph view draws these to an open call's outputs.

A tensor returned by several calls (a ``Sequential``'s output is its last layer's) belongs
to the innermost; a module that returns what it was given (``Identity``) makes it its own.
Walks are memoized, so each autograd node is visited once per recording, and nothing is
kept once the recording is built (``graph``): weak references for identities, and the
autograd nodes only until then.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Mapping

import torch
from torch import nn

from tandv_tb.event_files.graph_record import ModelGraph, TensorSpec
from tandv_tb.torch import naming
from tandv_tb.tracking.graph_builder import CallGraph

_NONE: tuple[str, ...] = ()
#: How deep containers are searched for tensors (a cache object holding lists of lists...).
_MAX_DEPTH = 6


def tensors_in(value: object) -> list[torch.Tensor]:
    """The tensors in a call's arguments or output, depth first."""
    found: list[torch.Tensor] = []
    _collect(value, found, 0)
    return found


def _collect(value: object, found: list, depth: int) -> None:
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, (tuple, list)):
        if depth < _MAX_DEPTH:
            for item in value:
                _collect(item, found, depth + 1)
    elif isinstance(value, Mapping):
        if depth < _MAX_DEPTH:
            for item in value.values():
                _collect(item, found, depth + 1)
    elif depth < _MAX_DEPTH and dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _collect(getattr(value, field.name, None), found, depth + 1)


def dtype_name(dtype: torch.dtype) -> str:
    """``float32``, ``bfloat16``: as numpy (and ml_dtypes) spell them."""
    return str(dtype).removeprefix("torch.")


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _dtype(tensor: torch.Tensor) -> str:
    name = _DTYPE_NAMES.get(tensor.dtype)
    if name is None:
        name = _DTYPE_NAMES[tensor.dtype] = dtype_name(tensor.dtype)
    return name


def _spec(tensor: torch.Tensor) -> TensorSpec | None:
    try:
        return TensorSpec(tuple(tensor.shape), _dtype(tensor))
    except Exception:  # a tensor without a plain shape (a jagged nested tensor)
        return None


def module_extra(module: nn.Module) -> dict:
    """``extra_repr`` and the module's own parameters (name, shape, dtype)."""
    try:
        text = str(module.extra_repr())
    except Exception:  # a module whose extra_repr fails says nothing more
        text = ""
    parameters = [
        {"name": name, "shape": list(p.shape), "dtype": _dtype(p)}
        for name, p in module._parameters.items()
        if p is not None
    ]
    return {"extra_repr": text, "parameters": parameters}


class Recording:
    """The graph of one forward pass, built as its calls begin and end.

    ``layers`` names the modules (``id(module)`` to the layer name the tracker uses).
    ``root`` is the model: once its first call ends, the recording is ``finished`` (the
    step's other forward passes, under gradient accumulation, are not the graph's). Calls
    of modules ``layers`` does not know (another model's) are left out.
    """

    def __init__(self, layers: Mapping[int, str], root: nn.Module) -> None:
        self._layers = layers
        self._root = root
        self._calls = CallGraph()
        # (module, call id) of the calls running, outermost first (None: one left out)
        self._running: list[tuple[nn.Module, str | None]] = []
        self._made_by: dict[object, str] = {}  # autograd node -> the call that returned it
        self._made_by_identity: dict[int, tuple[weakref.ref, str]] = {}
        self._memo: dict[object, tuple[str, ...]] = {}  # autograd node -> calls it comes from
        self._extras: dict[int, dict] = {}
        self.finished = False

    @property
    def started(self) -> bool:
        return len(self._calls) > 0

    @property
    def at_top(self) -> bool:
        """Whether no call of the model is running."""
        return not self._running

    def finish(self) -> None:
        """Take no more calls."""
        self.finished = True

    def begin(self, module: nn.Module, args: tuple, kwargs: Mapping, take: bool = True) -> None:
        """A call of ``module`` begins; ``take=False`` leaves it out, and every call in it."""
        layer = self._layers.get(id(module))
        if self.finished or layer is None:
            return
        if not take or (self._running and self._running[-1][1] is None):
            self._running.append((module, None))
            return
        inputs = tensors_in((args, kwargs))
        extra = self._extras.get(id(module))
        if extra is None:
            extra = self._extras[id(module)] = module_extra(module)
        call = self._calls.begin(
            layer, naming.module_type(module), [s for s in map(_spec, inputs) if s], extra
        )
        self._running.append((module, call))
        for tensor in inputs:
            for source in self._sources(tensor):
                self._calls.edge(source, call)

    def end(self, module: nn.Module, output: object) -> None:
        if self.finished or not self._running:
            return
        for index in range(len(self._running) - 1, -1, -1):  # a forward that raised
            if self._running[index][0] is module:  # left its calls unended: they end here
                break
        else:
            return
        call = self._running[index][1]
        del self._running[index:]
        if call is None:  # a call left out
            return
        outputs = tensors_in(output)
        self._calls.end(call, [s for s in map(_spec, outputs) if s])
        # A call without calls inside computes its output from its inputs (already edges).
        inner = self._calls.last != call
        for tensor in outputs:
            if inner:
                for source in self._output_sources(tensor):
                    self._calls.edge(source, call)
            self._made(tensor, call)
        if module is self._root and not self._running:
            self.finished = True

    def name_also(self, layers: Mapping[int, str]) -> None:
        """Name these modules too (a replayed part's shadows, ``graph_replay``)."""
        self._layers = {**self._layers, **layers}

    def stands_for(self, real: object, replayed: object) -> None:
        """The tensors of ``replayed`` (a replayed call's output, ``graph_replay``) stand
        for those of ``real`` (the compiled call's): a call later fed by one of them is fed
        by the call that returned its stand-in."""
        for tensor, stand_in in zip(tensors_in(real), tensors_in(replayed)):
            node = stand_in.grad_fn
            made = self._made_by.get(node) if node is not None else self._identity(stand_in)
            if made is not None:
                self._made(tensor, made)

    def graph(self) -> ModelGraph | None:
        """The graph recorded (None for no call); forgets the autograd nodes and tensors."""
        self._made_by, self._made_by_identity, self._memo = {}, {}, {}
        return self._calls.graph() if self.started else None

    # -- sources -------------------------------------------------------------------------
    def _sources(self, tensor: torch.Tensor) -> tuple[str, ...]:
        """The calls whose outputs ``tensor`` was computed from (the nearest ones)."""
        node = tensor.grad_fn
        if node is not None:
            made = self._made_by.get(node)
            return (made,) if made is not None else self._walk(node)
        made = self._identity(tensor)
        if made is None and tensor._base is not None:  # a view autograd does not follow
            made = self._identity(tensor._base)
        return _NONE if made is None else (made,)

    def _output_sources(self, tensor: torch.Tensor) -> tuple[str, ...]:
        """What a call's output was computed from: the call that returned it already (a
        child whose output it returns, or a call outside for a module returning its
        input), or the sources of the nodes its own node was computed from."""
        node = tensor.grad_fn
        if node is None or node in self._made_by:
            return self._sources(tensor)
        found: set[str] = set()
        for parent, _ in node.next_functions:
            if parent is not None:
                made = self._made_by.get(parent)
                found.update((made,) if made is not None else self._walk(parent))
        return tuple(found)

    def _identity(self, tensor: torch.Tensor) -> str | None:
        known = self._made_by_identity.get(id(tensor))
        return known[1] if known is not None and known[0]() is tensor else None

    def _walk(self, start: object) -> tuple[str, ...]:
        """The calls reached first going back from the autograd node ``start`` (memoized;
        iterative, as a deep model's graph is deeper than Python's recursion limit)."""
        memo, made_by = self._memo, self._made_by
        known = memo.get(start)
        if known is not None:
            return known
        stack = [start]
        while stack:
            node = stack[-1]
            if node in memo:
                stack.pop()
                continue
            parents = [n for n, _ in node.next_functions if n is not None]
            waiting = [n for n in parents if n not in memo and n not in made_by]
            if waiting:  # their answers first
                stack.extend(waiting)
                continue
            stack.pop()
            found: set[str] = set()
            for parent in parents:
                made = made_by.get(parent)
                if made is not None:
                    found.add(made)
                else:
                    found.update(memo[parent])
            memo[node] = tuple(found) if found else _NONE
        return memo[start]

    def _made(self, tensor: torch.Tensor, call: str) -> None:
        """``tensor`` was returned by ``call``: it belongs to it, unless a call inside
        ``call`` returned it first. Known by its autograd node, or (without one) by
        identity."""
        node = tensor.grad_fn
        if node is not None:
            before = self._made_by.get(node)
            if before is None or not self._calls.inside(before, call):
                if node in self._memo:  # walked through before it was an output: stale
                    self._memo.clear()
                self._made_by[node] = call
            return
        known = self._made_by_identity.get(id(tensor))
        if known is None or known[0]() is not tensor or not self._calls.inside(known[1], call):
            self._made_by_identity[id(tensor)] = (weakref.ref(tensor), call)
