"""What ``torch.compile`` needs of the tracker, in one place: the operator its hooks put
into compiled graphs, the rule for what a step does with a tensor, and when compiled code
is dropped.

- **The operator** ``tandv_tb::observe``. Under ``torch.compile`` dynamo traces the
  tracker's hooks into the model's graph (forward hooks, forward pre-hooks, ``attach``).
  There a hook calls ``observe``: a custom operator (``torch.library.custom_op``) whose fake
  implementation returns nothing, so dynamo and inductor trace it with no graph break,
  registered as an ordered effect, so that inductor neither drops it (nobody reads what it
  returns) nor reorders it (tensors arrive in execution order). At run time the operator
  hands its real tensor to the tracker that put the hook on (a ``Receiver`` registered
  here under an int key the graph holds as a constant: ``CompiledTracking.receive``).
- **The rule** (``tandv_tb.torch.step_tensors.StepTensors``, which eager hooks, ``attach``
  and the operator all take tensors through). Which of its two ways the operator takes a
  tensor is decided when it runs, so tracked and untracked steps run one compiled graph
  whenever the watch is on. Without the watch an untracked step needs no operator at all:
  the hooks read a bool (``emitting``, from ``StepTensors.taking``) that dynamo guards on,
  and the graph without operators is a second variant, compiled once.
- **Dropping compiled code** (``drop_compiled_code``, the one call of
  ``torch.compiler.reset``): dynamo does not guard on module hooks, so code compiled
  before ``track`` does not see them, and code traced with them still calls the operator
  after ``close``. ``CompiledTracking`` drops it at ``track`` (a compiled model), at the
  first tracked step (code that predates the hooks: ``CompiledBeforeTrackWarning``) and at
  ``close``.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable

import torch
from torch import nn

from tandv_tb.event_files.metadata import MODULE_OUTPUT_TYPES
from tandv_tb.torch import features, naming
from tandv_tb.torch.options import TorchOptions
from tandv_tb.torch.parameters import Parameters
from tandv_tb.torch.recorder import Recorder
from tandv_tb.torch.step_tensors import StepTensors
from tandv_tb.tracking.orders import Orders

#: What a tracker does with a tensor handed over by the graph:
#: ``receiver(name, tensor_type, module_type, tensor)``.
Receiver = Callable[[str, str, str, torch.Tensor], None]

_receivers: dict[int, Receiver] = {}
_keys = itertools.count(1)


def register(receiver: Receiver) -> int:
    """Make ``receiver`` reachable from compiled graphs; the key their operators carry."""
    key = next(_keys)
    _receivers[key] = receiver
    return key


def unregister(key: int) -> None:
    """Operators of graphs still holding ``key`` do nothing from now on."""
    _receivers.pop(key, None)


@torch.library.custom_op("tandv_tb::observe", mutates_args=())
def observe(tensor: torch.Tensor, key: int, name: str, tensor_type: str, module_type: str) -> None:
    """Hand ``tensor`` to the tracker registered under ``key`` (nothing once it is gone)."""
    receiver = _receivers.get(key)
    if receiver is not None:
        receiver(name, tensor_type, module_type, tensor)


@observe.register_fake
def _observe_fake(tensor, key, name, tensor_type, module_type) -> None:
    return None


#: Whether dynamo traces the tracker's hooks into compiled graphs (``features``: an ordered
#: effect keeps ``observe``, kept although it returns nothing, in program order). Where not,
#: compiled code hands nothing over: the hooks do nothing while dynamo traces, the compiled
#: modules' activations and gradients are not recorded (said once), and training is never
#: stopped.
HOOKS_IN_GRAPH = features.hooks_in_graph(features.register_ordered_effect(observe))


class _HandGradientOver(torch.autograd.Function):
    """The identity, whose backward hands the gradient to ``observe``: a module output's
    gradient taken inside the compiled backward.

    The forward returns an alias of the output that is no view (``detach``), so that the
    code after the module may still change it in place (``ReLU(inplace=True)``, ``out +=
    identity``), as it may change the output itself. A gradient hook on the output
    (``Tensor.register_hook``) would do the same, but dynamo traces such hooks with a
    speculation that, in torch 2.13, loses attribute writes of objects made earlier in the
    graph (a Hugging Face ``DynamicCache`` built while training): a graph break.
    """

    @staticmethod
    def forward(ctx, tensor, key, name, tensor_type, module_type):
        ctx.handed = (key, name, tensor_type, module_type)
        ctx.set_materialize_grads(False)  # an output no loss depends on gets no gradient
        return tensor.detach()

    @staticmethod
    def backward(ctx, grad):
        if grad is not None:
            observe(grad, *ctx.handed)
        return grad, None, None, None, None


def with_gradient_observed(
    tensor: torch.Tensor, key: int, name: str, tensor_type: str, module_type: str
) -> torch.Tensor:
    """``tensor`` as the code after a module should use it, so that its gradient is handed
    over as ``tensor_type`` when the backward reaches it."""
    return _HandGradientOver.apply(tensor, key, name, tensor_type, module_type)


def constant_in_graph(function: Callable) -> Callable:
    """``function`` evaluated once while dynamo traces and folded into the graph as a
    constant (it must depend only on its arguments: names, modules, options)."""
    return torch.compiler.assume_constant_result(function)


# -- dropping compiled code ----------------------------------------------------------------
class CompiledBeforeTrackWarning(UserWarning):
    """A model's compiled code was built before ``track`` hooked it (and is rebuilt)."""


def drop_compiled_code() -> None:
    """Drop every compiled graph (``torch.compiler.reset``, called here alone): dynamo does
    not guard on module hooks, so code compiled before the hooks were put on (or after
    they are gone) would not see them."""
    torch.compiler.reset()


def is_compiled(module: nn.Module) -> bool:
    """Whether ``module`` or a module in it is compiled (``torch.compile(m)`` wraps it,
    ``m.compile()`` marks it; the attributes are pinned by tests). Read from the
    dicts: ``hasattr`` on a module raises and formats a message inside
    ``nn.Module.__getattr__``, which costs a graph recording of 630 modules milliseconds."""
    return any(
        "_orig_mod" in m._modules or m.__dict__.get("_compiled_call_impl") is not None
        for m in module.modules()
    )


# -- one tracker's end of compiled graphs --------------------------------------------------
class CompiledTracking:
    """What a tracker does for ``torch.compile``: drops code compiled before its hooks (at
    ``track``, or at its first tracked step where the model's modules handed nothing over),
    receives the tensors its graphs hand over (``receive``, registered under ``key``),
    says which gradients a compiled step could not see, and drops the code its hooks were
    traced into when it closes."""

    def __init__(
        self,
        module: nn.Module,
        tensors: StepTensors,
        orders: Orders,
        recorder: Recorder,
        options: TorchOptions,
        parameters: Parameters,
    ) -> None:
        if is_compiled(module):  # its compiled code would not see the hooks put on later
            drop_compiled_code()
            if not HOOKS_IN_GRAPH:
                features.compiled_tracking_lacking()
        self._tensors = tensors
        self._orders = orders
        self._recorder = recorder
        self._options = options
        self._parameters = parameters
        self._root = naming.root_name(module)
        self.ran = False  # whether a compiled graph handed this tracker a tensor
        self._stale_checked = False
        self.key = register(self.receive)

    def receive(self, name: str, tensor_type: str, module_type: str, tensor: torch.Tensor) -> None:
        """A tensor a compiled graph hands over, taken as the eager hooks take it
        (``StepTensors``).

        Never from the step's memo (``reuse=False``): inductor writes a later value into a
        buffer nothing reads any more, with its own kernels, so the tensor object and its
        version counter stay the same (``out = fc2(h) + bias`` arrives as the tensor of
        ``fc2(h)`` handed over before; tests/trackers/torch/test_torch_compile_watch.py)."""
        self.ran = True
        try:
            self._orders.module(name, tensor_type)  # placed as it runs, as the hooks do
            if tensor_type == "Activation" and not self._options.track_activations:
                return  # only placed in the order, for its gradient
            self._tensors.take(name, tensor_type, module_type, tensor, reuse=False)
        except Exception as error:  # tracking never stops training
            self._recorder.skip(name, tensor_type, f"{type(error).__name__}: {error}")

    def check_step(self, step: int) -> None:
        """At the end of a tracked step, before its statistics are fetched: at the first, drop
        code that predates the hooks (``_check_stale``); after a compiled step, say which
        of the model's own outputs got no gradient (``_check_root_gradients``)."""
        if not self._stale_checked:
            self._stale_checked = True
            self._check_stale(step)
        if self.ran:
            self._check_root_gradients()

    def _check_stale(self, step: int) -> None:
        """Where modules whose parameters got gradients handed over none of their outputs,
        their compiled code predates the hooks (dynamo does not guard on module hooks). Say
        so, and drop the compiled code so the next steps record."""
        options = self._options
        if not (options.track_activations or options.track_gradients):
            return
        root = self._root
        recorded = self._recorder.buffer.names_and_types()
        of_modules = {
            name
            for name, tensor_type in recorded
            if tensor_type in MODULE_OUTPUT_TYPES
            and name != root
            and not name.startswith((f"{root}.", f"{root}["))  # the root's tuple output
        }
        if of_modules:
            return
        with_gradients = {
            name for name, tensor_type in recorded if tensor_type == "Weight_Gradient"
        }
        selected = options.selected
        with_gradients.update(p.name for p, _, _ in self._parameters.gradients(selected))
        owners = {name.rpartition(".")[0] for name in with_gradients}
        if not any(owner and selected(owner) for owner in owners):
            return
        if not HOOKS_IN_GRAPH:  # compiled code hands nothing over on this torch
            features.compiled_tracking_lacking()
            return
        warnings.warn(
            f"tandv_tb: the model's compiled code was built before track() hooked it, so step "
            f"{step} recorded no activations or gradients of its modules; tandv_tb "
            "called torch.compiler.reset() and the next steps record them (call track() "
            "before the model's first compiled call to spare the recompile)",
            CompiledBeforeTrackWarning,
            stacklevel=4,
        )
        drop_compiled_code()

    def _check_root_gradients(self) -> None:
        """Say which of the model's own outputs got no gradient in a compiled step that
        ran its backward: a hook outside the compiled graph sees only what flows in from
        after it, not the loss the model computed from the output inside its forward."""
        recorded = set(self._recorder.buffer.names_and_types())
        if not any(tensor_type == "Gradient" for _, tensor_type in recorded):
            return
        root = self._root
        for name, tensor_type in recorded:
            of_root = name == root or name.startswith((f"{root}.", f"{root}["))
            if of_root and tensor_type == "Activation" and (name, "Gradient") not in recorded:
                self._recorder.skip(
                    name,
                    "Gradient",
                    "under torch.compile a gradient hook on the model's own output sees the "
                    "gradient flowing in from after the compiled graph, and none did (a loss "
                    "computed from it inside the forward stays in the graph)",
                )

    def close(self) -> None:
        """The operators of its graphs do nothing from now on; where they ran, the graphs
        are compiled anew (they still call the operator)."""
        unregister(self.key)
        if self.ran:
            drop_compiled_code()
