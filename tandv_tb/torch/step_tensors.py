"""What a step does with a tensor that a hook, ``attach`` or a compiled graph sees, one rule
for eager and compiled models alike (``StepTensors``): it is recorded on a tracked step (its
statistics computed on its own device and kept there until ``step()``), checked for NaN/Inf
on another where the watch is on, and the forward tensors of a checkpointed forward
recomputed inside the backward are not taken again (``recomputing``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from tandv_tb.event_files.metadata import FORWARD_TYPES
from tandv_tb.torch.parallel_layout import Spread
from tandv_tb.torch.parameters import Named, Parameters
from tandv_tb.torch.recorder import Recorder
from tandv_tb.torch.watch import Watch


def recomputing() -> bool:
    """Whether autograd is running a backward pass (a checkpointed forward recomputing).

    Private, pinned by tests/project/test_private_api_pins.py: torch has no public way to ask.
    Without it a checkpointed block's activations would be recorded twice, their counts
    doubled (tests/trackers/torch/test_torch_environments.py checks they are not); a call
    costs well under a microsecond, once per module output on tracked steps.
    """
    graph_task_id = getattr(torch._C, "_current_graph_task_id", None)
    return graph_task_id is not None and graph_task_id() != -1


class StepTensors:
    """The one rule for what a step does with a tensor that a hook, ``attach`` or a
    compiled graph sees: it is recorded on a tracked step (``active``), checked for
    NaN/Inf on another where the watch is on, and taken nowhere else; the activations and
    inputs of a checkpointed forward recomputed inside the backward are not taken again."""

    def __init__(self, active: Callable[[], bool], recorder: Recorder, watch: Watch | None):
        self._active = active
        self._recorder = recorder
        self._watch = watch

    def taking(self) -> bool:
        """Whether this step's tensors are taken at all (compiled graphs guard on it)."""
        return self._active() or self._watch is not None

    def recording(self) -> bool:
        """Whether this step's tensors are recorded (a tracked step)."""
        return self._active()

    def spread(self, name: str, tensor: torch.Tensor) -> Spread:
        """How this rank's values of a module's output or input stand to the other ranks'
        (``ParallelLayout.of_data``); its gradient's are the same."""
        return self._recorder.layout.of_data(name, tensor)

    def take(
        self, name: str, tensor_type: str, module_type: str, tensor: torch.Tensor,
        *, spread: Spread | None = None, reuse: bool = True,
    ) -> None:  # fmt: skip
        """Record ``tensor`` or check it, by the rule (``spread`` and ``reuse``:
        ``Recorder.record``)."""
        if tensor_type in FORWARD_TYPES and recomputing():  # taken in the first forward
            return
        if self._active():
            self._recorder.record(name, tensor_type, module_type, tensor, spread, reuse)
        elif self._watch is not None:
            self._watch.check(name, tensor_type, tensor, spread, reuse=reuse)

    def take_parameters(
        self, parameters: Parameters, tensors: Iterable[Named], *, unchanged: bool = False
    ) -> None:
        """Take parameters' tensors (weight gradients, weights, optimizer state) by the
        rule; ``unchanged``: they stay as they are until the step ends (``Watch``)."""
        if self._active():
            parameters.record(self._recorder, tensors)
        elif self._watch is not None:
            spread = self._recorder.layout.of_parameter
            self._watch.check_all(
                ((p.name, kind, tensor, spread(p.name, tensor)) for p, kind, tensor in tensors),
                unchanged=unchanged,
            )
