"""Module inputs (``Input``) and the gradients w.r.t. them (``Input_Gradient``).

A forward pre-hook sees the inputs before the module runs, so a module that changes its
input in place (``ReLU(inplace=True)``) has its input recorded as it was given. The gradient
comes from ``Tensor.register_hook`` on each input: it is the gradient of the loss w.r.t.
that tensor, over all its uses (what ``torch.autograd.grad(loss, input)`` returns), also
when the module changes it in place afterwards.

Inputs are named as outputs are (``name``, ``name.1``, ... by position, then
``name.<keyword>``), and ordered where the module starts, before its children's outputs.
Non-tensor inputs and integer or boolean tensors (token ids, masks) are skipped silently.

As ``hooks`` does for outputs, they are taken by ``step_tensors.StepTensors`` (on untracked
steps, with a ``Watch``, only checked for NaN/Inf); under ``torch.compile`` the traced hooks
hand them to the graph's operator.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import torch
from torch import nn

from tandv_tb.torch import naming
from tandv_tb.torch.hooks import HookHandles
from tandv_tb.torch.pipeline_stage import Stage


class InputHooks(HookHandles):
    """Forward pre-hooks on every module of a model; ``remove`` takes them all off."""

    def _hooks_root(self, stage: Stage) -> bool:
        return stage.first

    def _hook(self, name: str, module_type: str, module: nn.Module) -> object:
        hook = functools.partial(self._on_input, name, module_type)
        return module.register_forward_pre_hook(hook, with_kwargs=True)

    def _on_input(
        self, name: str, module_type: str, module: nn.Module, args: tuple, kwargs: dict
    ) -> None:
        if self._passed_over(module):
            return
        if torch.compiler.is_compiling():
            if self.emitting:
                self._trace_inputs(name, module_type, args, kwargs)
        elif self._tensors.taking():
            self._take_inputs(name, module_type, args, kwargs)

    def _trace_inputs(self, name: str, module_type: str, args: tuple, kwargs: dict) -> None:
        for leaf, tensor in self._floating_inputs(name, args, kwargs, self._selected_traced):
            self._observe(leaf, "Input", module_type, tensor)

    def _floating_inputs(
        self, name: str, args: tuple, kwargs: dict, selected: Callable[[str], bool]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """The floating-point inputs that are ``selected``, with their names."""
        leaves = list(naming.input_tensors(args, kwargs, name))
        for leaf, tensor in naming.distinct_names(leaves, name, self._paths):
            if tensor.is_floating_point() and selected(leaf):
                yield leaf, tensor

    def _take_inputs(self, name: str, module_type: str, args: tuple, kwargs: dict) -> None:
        recording = self._tensors.recording()
        for leaf, tensor in self._floating_inputs(name, args, kwargs, self._selected):
            if recording:  # placed where its module starts
                self._orders.module(leaf, "Input")
            spread = self._tensors.spread(leaf, tensor)  # its gradient's too
            self._tensors.take(leaf, "Input", module_type, tensor, spread=spread)
            if self._gradients and tensor.requires_grad:
                hook = functools.partial(
                    self._take_gradient, leaf, "Input_Gradient", module_type, spread
                )
                self._hook_gradient(tensor, hook)
