"""Weights, their gradients and the optimizer's state.

The weight gradients are read when the optimizer steps (a step pre-hook): they are the
gradients the update uses (unscaled, under ``torch.amp.GradScaler``), whatever the loop
does with them before ``tracker.step()`` (``zero_grad`` first, as nanoGPT does); a step
given a closure (Lightning's, LBFGS's) computes them in it, so they are read when the
closure first returns. Where the optimizer did not step (none was given, or GradScaler
skipped a step over Inf) they are read at ``tracker.step()``. The weights and the
optimizer's state are read at ``tracker.step()``, after the update.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import torch
from torch import nn

from tandv_tb.event_files.metadata import OPTIMISER_STATE_PREFIX
from tandv_tb.torch import naming
from tandv_tb.torch.recorder import Recorder


@dataclasses.dataclass(frozen=True)
class NamedParameter:
    name: str
    parameter: torch.Tensor
    module_type: str


#: A parameter, a tensor type and the tensor of that type it has.
Named = tuple[NamedParameter, str, torch.Tensor]


def _is_fsdp1(root: nn.Module) -> bool:
    """Whether FSDP (the FullyShardedDataParallel wrapper) shards the parameters."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:
        return False
    return any(isinstance(module, FullyShardedDataParallel) for module in root.modules())


class Parameters:
    """The model's parameters by name, and the optimizer's parameters among them."""

    def __init__(self, root: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        self._named = [
            NamedParameter(name, parameter, naming.module_type(owner))
            for name, parameter, owner in naming.named_parameters(root)
        ]
        self._by_id = {id(p.parameter): p for p in self._named}
        self._optimizer = optimizer
        #: Whether ranks hold different parts of the parameters (FSDP1's flat parameters;
        #: a DTensor tells for itself).
        self.flat = _is_fsdp1(root)

    def names(self) -> list[str]:
        """The model's parameters' names, in the order they were registered."""
        return [p.name for p in self._named]

    def every(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Every parameter, the model's and the optimizer's, by name."""
        yield from ((p.name, p.parameter) for p in self._named)
        if self._optimizer is not None:
            yield from ((p.name, p.parameter) for p in self._optimizer_parameters())

    def record(self, recorder: Recorder, tensors: Iterator[Named]) -> None:
        """Record ``tensors`` (from ``gradients`` or ``weights_and_state``), together."""
        spread = recorder.layout.of_parameter
        recorder.record_many(
            (p.name, tensor_type, p.module_type, tensor, spread(p.name, tensor))
            for p, tensor_type, tensor in tensors
        )

    def gradients(self, selected: Callable[[str], bool]) -> Iterator[Named]:
        """Every selected weight gradient there is now."""
        for p in self._named:
            if p.parameter.grad is not None and selected(p.name):
                yield p, "Weight_Gradient", p.parameter.grad

    def weights_and_state(
        self, selected: Callable[[str], bool], *, weights: bool, optimizer_state: bool
    ) -> Iterator[Named]:
        """Every selected weight, then every optimizer state tensor (in the order a NaN
        reaches them after the weight gradients)."""
        if weights:
            for p in self._named:
                if selected(p.name):
                    yield p, "Weight", p.parameter
        if optimizer_state and self._optimizer is not None:
            for p in self._optimizer_parameters():
                if not selected(p.name):
                    continue
                for key, value in self._optimizer.state.get(p.parameter, {}).items():
                    # Scalar entries (``step``) describe no tensor of the model.
                    if isinstance(value, torch.Tensor) and value.dim() > 0:
                        yield p, f"{OPTIMISER_STATE_PREFIX}{key}", value

    def _optimizer_parameters(self) -> Iterator[NamedParameter]:
        """The optimizer's parameters, named by the model (or by their place in it)."""
        for group_index, group in enumerate(self._optimizer.param_groups):
            for index, parameter in enumerate(group["params"]):
                named = self._by_id.get(id(parameter))
                if named is None:
                    name = f"optimizer.param_groups.{group_index}.{index}"
                    named = NamedParameter(name, parameter, "")
                    self._by_id[id(parameter)] = named
                yield named
