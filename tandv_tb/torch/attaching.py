"""``attach``: record any tensor inside a forward, as ``Activation`` (and its ``Gradient``).

A tracker registers itself here while it takes tensors: during its tracked steps, and on
every step while its watch is on (an attached tensor is then checked for NaN/Inf as module
outputs are). ``attach`` first reads one module-level int, so outside a tracker it costs a
global lookup and a comparison. Under ``torch.compile`` that int is a guard of the compiled
graph, and a traced ``attach`` hands the tensor to the graph's operator (``compiled``) with
no graph break: its name is decided while tracing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from tandv_tb.torch import compiled, naming
from tandv_tb.torch.skips import untrackable_reason
from tandv_tb.tracking.skip_log import SkipLog

#: The trackers whose tracked step is running now (read by ``attach`` before anything else).
_sinks: list[Attachments] = []
_active_count = 0

#: The name of a tensor attached with an empty name and no module.
EMPTY_NAME = "(empty name)"


def attach(tensor: torch.Tensor, name: str, module: nn.Module | None = None) -> torch.Tensor:
    """Record ``tensor`` now (``Activation``) and its gradient when it gets one (``Gradient``).

    Call it inside a forward: ``h = attach(h, "pre_norm", self)``. The name is ``<path of
    module>.<name>`` (the module's path as the tracker names modules; the root module's
    path is its class name), or ``name`` when no module is given. It is placed in the model's
    order where it runs, between the outputs of the modules around it. It returns
    ``tensor`` itself and does nothing outside a tracked step of a tracker. A tensor
    attached several times in a step gives one record covering every call. Non-tensors,
    integer and meta tensors are skipped with one warning per name; ``attach`` never raises.

    Under ``torch.compile`` it adds no graph break: the compiled graph hands the tensor
    over as it runs.
    """
    if _active_count:
        compiling = torch.compiler.is_compiling()
        if compiling and not compiled.HOOKS_IN_GRAPH:
            return tensor
        for sink in _sinks:
            if compiling:
                sink.trace(tensor, name, module)
            else:
                sink.record(tensor, name, module)
    return tensor


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """``attach`` does nothing in this context: a forward that is not the training's (the
    graph's eager replay of a compiled model, ``graph_replay``)."""
    global _active_count
    saved, _active_count = _active_count, 0
    try:
        yield
    finally:
        _active_count = saved


class Attachments:
    """One tracker's end of ``attach``: names attached tensors and hands them to its hooks.

    ``record_output(name, module_type, tensor)`` takes a tensor as a module output is taken
    eagerly (order by first execution, gradient hook, selection, activation
    checkpointing), ``trace_output`` the same inside a traced graph.
    """

    def __init__(
        self,
        root: nn.Module,
        record_output: Callable[[str, str, torch.Tensor], None],
        trace_output: Callable[[str, str, torch.Tensor], None],
        skips: SkipLog,
        only_training: bool,
    ) -> None:
        label = naming.root_name(root)
        self._paths = {id(m): path or label for path, m in naming.named_modules(root)}
        self._modules = {id(m): m for _, m in naming.named_modules(root)}  # keeps ids valid
        self._root = naming.unwrap(root)
        self._record_output = record_output
        self._trace_output = trace_output
        self._skips = skips
        self._only_training = only_training
        self._active = False

    def set_active(self, active: bool) -> None:
        """Receive ``attach`` calls (the tracker takes tensors this step) or stop."""
        global _active_count
        if active == self._active:
            return
        self._active = active
        if active:
            _sinks.append(self)
        else:
            _sinks.remove(self)
        _active_count = len(_sinks)

    def record(self, tensor: object, name: object, module: nn.Module | None) -> None:
        try:
            full_name = self._name(name, module)
            if full_name is None:
                return
            owner = self._root if module is None else module
            if self._only_training and not owner.training:
                return
            reason = _unattachable_reason(tensor)
            if reason is not None:
                self._skips.skip(full_name, "Activation", reason)
                return
            self._record_output(full_name, "", tensor)
        except Exception as error:  # attach never stops training
            self._skips.skip(str(name), "Activation", f"{type(error).__name__}: {error}")

    def trace(self, tensor: object, name: object, module: nn.Module | None) -> None:
        """``record`` inside a graph dynamo traces: what is decided from names, modules and
        types is decided once, while tracing."""
        full_name = _traced_name(self, name, module)
        if full_name is None:
            return
        owner = self._root if module is None else module
        if self._only_training and not owner.training:
            return
        if not isinstance(tensor, torch.Tensor):
            _traced_skip(self, full_name, _unattachable_reason(tensor))
            return
        self._trace_output(full_name, "", tensor)

    def _name(self, name: object, module: nn.Module | None) -> str | None:
        """The tracked name, or None when ``module`` belongs to another model."""
        name = name if isinstance(name, str) else str(name)
        if module is None:
            return name or EMPTY_NAME
        path = self._paths.get(id(naming.unwrap(module)) if isinstance(module, nn.Module) else 0)
        if path is None:
            if len(_sinks) == 1:  # no tracker knows it: say so (several trackers: another may)
                self._skips.skip(name, "Activation", "its module is not in the tracked model")
            return None
        return f"{path}.{name}"


@compiled.constant_in_graph
def _traced_name(sink: Attachments, name: object, module: nn.Module | None) -> str | None:
    return sink._name(name, module)


@compiled.constant_in_graph
def _traced_skip(sink: Attachments, name: str, reason: str) -> None:
    sink._skips.skip(name, "Activation", reason)


def _unattachable_reason(tensor: object) -> str | None:
    if not isinstance(tensor, torch.Tensor):
        return f"attach needs a torch.Tensor, got {type(tensor).__name__}"
    return untrackable_reason(tensor)
