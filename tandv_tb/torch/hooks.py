"""Module hooks: activations at every module output, gradients w.r.t. those outputs.

Gradients come from ``Tensor.register_hook`` on each output, registered in the forward
hook. Unlike module backward hooks this leaves the output tensors untouched, so in-place
operations on them later (``ReLU(inplace=True)``, ``out += identity``) work; such a hook
receives the gradient w.r.t. the value the module returned.

Eagerly the hooks hand each tensor to ``step_tensors.StepTensors`` as they fire: its
statistics are computed (tracked steps) or it is checked for NaN/Inf (untracked steps,
with a ``Watch``). Under ``torch.compile`` dynamo traces them: they hand each tensor to the
graph's ``tandv_tb::observe`` operator (``compiled``), which gives it to the tracker at run
time, and their gradient hooks do the same in the compiled backward. Which names are
selected is decided once, while tracing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from tandv_tb.event_files.metadata import GRADIENT_TYPE
from tandv_tb.torch import compiled, naming
from tandv_tb.torch.options import TorchOptions
from tandv_tb.torch.parallel_layout import Spread
from tandv_tb.torch.pipeline_stage import WHOLE_MODEL, Stage
from tandv_tb.torch.step_tensors import StepTensors
from tandv_tb.tracking.orders import Orders


@compiled.constant_in_graph
def _selected_in_graph(selected: Callable[[str], bool], name: str) -> bool:
    """``selected(name)`` (regular expressions) decided while dynamo traces."""
    return selected(name)


class HookHandles:
    """What both sets of module hooks (outputs, inputs) share: the options they record
    with, every module by its name, and the hooks they put on: on modules for their life,
    on leaf tensors for a step (their gradient hooks outlive the step's graph).

    Eagerly they hand tensors to ``tensors`` (``StepTensors``: recorded, checked, or
    not taken), placed in the model's order on a tracked step. ``receiver_key`` names the
    tracker's receiver in compiled graphs (``compiled``), and ``emitting`` says whether
    compiled hooks hand tensors to it this step (``StepTensors.taking``). Dynamo guards on
    it, so its two values are at most two variants of a compiled graph. ``stage`` is the
    pipeline stage the root module is (``pipeline_stage``): its root's output (or input) is
    the model's on the last (first) stage alone, and its module runs on stand-in tensors
    while it is ``inferring``.
    """

    def __init__(
        self,
        root: nn.Module,
        tensors: StepTensors,
        options: TorchOptions,
        orders: Orders,
        stage: Stage = WHOLE_MODEL,
    ) -> None:
        self._handles: list = []
        self._leaf_handles: list = []
        self._tensors = tensors
        self._options = options
        self._selected = options.selected
        self._gradients = options.track_gradients
        self._only_training = options.only_training
        self._orders = orders
        self.receiver_key = 0
        self.emitting = True
        self._stage = stage
        label = self._root_name = naming.root_name(root)
        modules = [(path or label, module) for path, module in naming.named_modules(root)]
        self._paths = {name for name, _ in modules}
        for name, module in modules if self._hooks_root(stage) else modules[1:]:
            handle = self._hook(name, naming.module_type(module), module)
            if handle is not None:
                self._handles.append(handle)

    def _hook(self, name: str, module_type: str, module: nn.Module) -> object:
        """Put this set's hook on ``module``; its handle (None for no hook)."""
        raise NotImplementedError

    def _hooks_root(self, stage: Stage) -> bool:
        """Whether the root module's tensors of this set are the model's."""
        raise NotImplementedError

    def _passed_over(self, module: nn.Module) -> bool:
        """Whether a call of ``module`` is not taken: a module in eval mode (with
        ``only_training``), or the stage inferring its shapes."""
        return (self._only_training and not module.training) or self._stage.inferring()

    def _hook_gradient(self, tensor: torch.Tensor, hook: Callable) -> None:
        """Call ``hook`` with ``tensor``'s gradient (this step only, for a leaf tensor)."""
        handle = tensor.register_hook(hook)
        if tensor.grad_fn is None:
            self._leaf_handles.append(handle)

    def _selected_traced(self, name: str) -> bool:
        """Whether ``name`` is selected, decided while dynamo traces."""
        return _selected_in_graph(self._selected, name)

    def _take_gradient(
        self,
        name: str,
        tensor_type: str,
        module_type: str,
        spread: Spread,
        grad: torch.Tensor,
    ) -> None:
        self._tensors.take(name, tensor_type, module_type, grad, spread=spread)

    def _observe(self, name: str, tensor_type: str, module_type: str, tensor) -> None:
        """Inside a traced graph: hand ``tensor`` to the tracker, and its gradient (over all
        its uses) when the backward reaches it, through a gradient hook."""
        compiled.observe(tensor, self.receiver_key, name, tensor_type, module_type)
        if self._gradients and tensor.requires_grad:
            gradient_type = GRADIENT_TYPE[tensor_type]
            observe = functools.partial(self._observe_gradient, name, gradient_type, module_type)
            tensor.register_hook(observe)

    def _observe_gradient(
        self, name: str, tensor_type: str, module_type: str, grad: torch.Tensor | None
    ) -> None:
        if grad is not None:  # an output no loss depends on
            compiled.observe(grad, self.receiver_key, name, tensor_type, module_type)

    def end_step(self) -> None:
        """Drop the gradient hooks this step put on leaf tensors (parameters, inputs)."""
        for handle in self._leaf_handles:
            handle.remove()
        self._leaf_handles = []

    def remove(self) -> None:
        self.end_step()
        for handle in self._handles:
            handle.remove()
        self._handles = []


class ModuleHooks(HookHandles):
    """Forward hooks on every module of a model; ``remove`` takes them all off."""

    def _hooks_root(self, stage: Stage) -> bool:
        return stage.last

    def _hook(self, name: str, module_type: str, module: nn.Module) -> object:
        if not (self._options.track_activations or self._gradients):
            return None
        hook = functools.partial(self._on_forward, name, module_type)
        return module.register_forward_hook(hook)

    def record_tensor(self, name: str, module_type: str, tensor: torch.Tensor) -> None:
        """Take ``tensor`` as a module output now (``attach``, eagerly)."""
        if self._tensors.taking() and not self._stage.inferring():
            self._take_output(name, module_type, tensor)

    def trace_tensor(self, name: str, module_type: str, tensor: torch.Tensor) -> None:
        """Take ``tensor`` as a module output in a traced graph (``attach``, which returns
        the tensor itself: its gradient comes from a hook on it)."""
        if self._selected_traced(name):
            self._observe(name, "Activation", module_type, tensor)

    def _on_forward(
        self, name: str, module_type: str, module: nn.Module, args: object, output: object
    ) -> object:
        if self._passed_over(module):
            return None
        if torch.compiler.is_compiling():
            return self._trace_output(name, module_type, output) if self.emitting else None
        if self._tensors.taking():
            self._take_output(name, module_type, output)
        return None

    def _trace_output(self, name: str, module_type: str, output: object) -> object:
        """In a traced graph: hand each selected tensor of ``output`` over, and return the
        output its callers get, with the tensors whose gradient is taken replaced by an
        identity that hands the gradient over in the compiled backward.

        That gradient flows through what the module returns, which is every use of the
        output in the rest of the model; only the module itself may have used the output
        before returning it. The root module does (a model computing its loss from its
        logits), so its outputs take a gradient hook, as eagerly: compiled with the model
        (``model.compile()``) the hook sees every use; run after a compiled forward
        (``torch.compile(model)``) it sees what flows in from after the graph, and the
        tracker says when that was nothing. Nothing follows the root's hook in the graph,
        where a traced hook could lose what later code writes (``compiled``)."""
        if name == self._root_name:
            for leaf, tensor in self._output_tensors(name, output):
                self.trace_tensor(leaf, module_type, tensor)
            return None
        leaves = list(naming.output_tensors(output, name))
        names = dict(
            zip((leaf for leaf, _ in leaves), (leaf for leaf, _ in self._distinct(name, leaves)))
        )

        def observed(leaf: str, tensor: torch.Tensor) -> torch.Tensor:
            leaf = names[leaf]
            if not self._selected_traced(leaf):
                return tensor
            compiled.observe(tensor, self.receiver_key, leaf, "Activation", module_type)
            if not (self._gradients and tensor.requires_grad):
                return tensor
            return compiled.with_gradient_observed(
                tensor, self.receiver_key, leaf, "Gradient", module_type
            )

        return naming.map_output_tensors(output, name, observed)

    def _take_output(self, name: str, module_type: str, output: object) -> None:
        """Each selected tensor of ``output`` as an activation, and its gradient through a
        hook. A checkpointed segment recomputed inside the backward keeps its gradient
        hooks (reentrant checkpointing sends the gradients through the recomputed
        outputs); ``StepTensors`` takes its activations the first time only."""
        recording = self._tensors.recording()
        for leaf, tensor in self._output_tensors(name, output):
            if not self._selected(leaf):
                continue
            if recording:  # placed in the model, for its gradient too
                self._orders.module(leaf, "Activation")
            spread = self._tensors.spread(leaf, tensor)  # its gradient's too
            if self._options.track_activations:
                self._tensors.take(leaf, "Activation", module_type, tensor, spread=spread)
            if self._gradients and tensor.requires_grad:
                hook = functools.partial(self._take_gradient, leaf, "Gradient", module_type, spread)
                self._hook_gradient(tensor, hook)

    def _output_tensors(self, name: str, output: object) -> list[tuple[str, torch.Tensor]]:
        """``naming.output_tensors``, named distinctly (``_distinct``)."""
        return self._distinct(name, list(naming.output_tensors(output, name)))

    def _distinct(self, name: str, leaves: list[tuple[str, torch.Tensor]]) -> list:
        """``leaves``, where one of the names is also a module's (``seq.1`` of a
        Sequential's tuple output), all but the first named ``seq[1]``, ``seq[2]``..."""
        return naming.distinct_names(leaves, name, self._paths)
