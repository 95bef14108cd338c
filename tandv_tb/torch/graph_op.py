"""The tracker inside ``torch.compile``: one operator of PyTorch's graph, ``tandv_tb::observe``.

Under ``torch.compile`` dynamo traces the tracker's hooks into the model's graph (forward
hooks, forward pre-hooks, ``attach``). There a hook calls ``observe``: a custom operator
(``torch.library.custom_op``) whose fake implementation returns nothing, so dynamo and
inductor trace it with no graph break, registered as an ordered effect, so that inductor
neither drops it (nobody reads what it returns) nor reorders it (tensors arrive in
execution order). At run time the operator hands its real tensor to the tracker that put
the hook on (a ``Receiver`` registered here under an int key the graph holds as a
constant), which computes its statistics on the tensor's own device with the kernels an
eager hook's tensor gets (``TANDV_TB_KERNEL``: the CPU kernel, the Triton kernels on a GPU,
else the branch-free array kernel) and keeps them there until ``step()``, as an eager
hook does; on a step it does not track it checks the tensor for NaN/Inf instead.

Which of the two the operator does is decided when it runs, so tracked and untracked
steps run one compiled graph whenever the watch is on. Without the watch an untracked step
needs no operator at all: the hooks read a bool (``emitting``) that dynamo guards on, and
the graph without operators is a second variant, compiled once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

#: Whether dynamo traces the tracker's hooks into compiled graphs. Tested on torch 2.13;
#: torch 2.11's dynamo stops with an internal error on them (a CUDA machine's run of
#: ``.ci/gpu-checks``), so before 2.13 compiled code hands nothing over: the hooks do
#: nothing while dynamo traces, the compiled modules' activations and gradients are not
#: recorded (``track`` says so), and training is never stopped.
HOOKS_IN_GRAPH = torch.__version__ >= "2.13"

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


# An ordered effect: kept although it returns nothing, and run in program order.
observe.register_effect(torch.library.EffectType.ORDERED)


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
