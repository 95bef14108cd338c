"""The graph of a compiled model: one eager forward of a copy of its module tree.

Under ``torch.compile`` the module hooks are traced by dynamo, not run, so a compiled
forward shows nothing of its calls or of the autograd graph between them. Once, after the
model's first compiled call of the step that records its graph, the call is run again
eagerly, with the same arguments, on a *shadow* of the model: a shallow copy of every
module (same classes, same attributes and forward code, the same parameters) holding
copies of its buffers and none of its hooks or compiled code. The graph is recorded on it
exactly as on an eager model (``Recording``), so it is the eager graph.

The replay changes nothing of the training: the random number generators are restored
after it, buffers it updates (BatchNorm's running statistics) are its copies, the
tensors autograd would save for a backward are dropped as it saves them (no memory held
beyond a forward without gradients), compiled functions it calls run eagerly
(``set_stance("force_eager")``: nothing is compiled or recompiled), and ``attach`` does
nothing meanwhile. Only Python state a forward changes in place on objects its modules
share (a mutable attribute updated in ``forward``) is shared with the model.

A compiled part called by eager code outside the model's calls (a compiled submodule
called from a Lightning ``training_step``) is replayed alone, after its call, into the
step's recording (``replay_into``).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator, Mapping

import torch
from torch import nn

from tandv_tb.event_files.graph_record import ModelGraph
from tandv_tb.torch import attaching
from tandv_tb.torch.graph_recording import Recording, tensors_in


def _shadow(module: nn.Module, made: dict[int, nn.Module]) -> nn.Module:
    """A shallow copy of ``module``'s tree sharing its parameters, with copies of its
    buffers and without hooks or compiled code (a module reachable twice is copied once)."""
    known = made.get(id(module))
    if known is not None:
        return known
    compiled = module._modules.get("_orig_mod")  # torch.compile(child): the child itself
    if compiled is not None:
        return _shadow(compiled, made)
    shadow = type(module).__new__(type(module))
    state = dict(module.__dict__)
    for key, value in module.__dict__.items():
        if "hooks" in key and isinstance(value, dict):  # _forward_hooks, ..._with_kwargs
            state[key] = type(value)()
        elif isinstance(value, types.MethodType) and value.__self__ is module:
            state[key] = types.MethodType(value.__func__, shadow)  # a forward set on it
    state["_parameters"] = dict(module._parameters)
    state["_buffers"] = {
        name: None if b is None else b.detach().clone() for name, b in module._buffers.items()
    }
    state["_compiled_call_impl"] = None
    shadow.__dict__.update(state)
    made[id(module)] = shadow
    shadow.__dict__["_modules"] = {
        name: None if child is None else _shadow(child, made)
        for name, child in module._modules.items()
    }
    return shadow


def _devices(root: nn.Module, values: object) -> tuple[str, list[int]]:
    """The accelerator type and indices whose generators a forward may draw from."""
    tensors = [*root.parameters(), *root.buffers(), *tensors_in(values)]
    kinds = {t.device.type for t in tensors} - {"cpu", "meta"}
    kind = min(kinds) if kinds else "cuda"
    return kind, sorted({t.device.index or 0 for t in tensors if t.device.type == kind})


@contextlib.contextmanager
def _apart(root: nn.Module, args: tuple, kwargs: Mapping) -> Iterator[None]:
    """What keeps the replay off the training (see the module's doc)."""
    kind, devices = _devices(root, (args, kwargs))
    with (
        torch.random.fork_rng(devices=devices, device_type=kind),
        torch.autograd.graph.saved_tensors_hooks(_drop, _never),
        torch.compiler.set_stance("force_eager"),
        attaching.paused(),
    ):
        yield


def _drop(tensor: torch.Tensor) -> None:
    return None


def _never(packed: None) -> torch.Tensor:
    raise RuntimeError("tandv_tb: the graph's replay has no backward")


def replay(
    root: nn.Module, layers: Mapping[int, str], args: tuple, kwargs: Mapping
) -> ModelGraph | None:
    """The graph of ``root(*args, **kwargs)`` run eagerly on a shadow of ``root``
    (``layers``: ``id`` of each of ``root``'s modules to its layer name)."""
    recording, _ = _run_on_shadow(root, layers, args, kwargs, None)
    return recording.graph()


def replay_into(
    recording: Recording,
    module: nn.Module,
    layers: Mapping[int, str],
    call: tuple[tuple, Mapping, object],
) -> None:
    """One call of a compiled part of the model made by eager code outside the model's
    calls (``self.net = torch.compile(self.net)`` called from a ``training_step``), run
    again eagerly on a shadow of ``module`` into the step's ``recording``; ``call`` is its
    ``(args, kwargs, output)``. The shadow's outputs stand for ``output``, so that the
    calls fed by it get their edges."""
    args, kwargs, output = call
    _, replayed = _run_on_shadow(module, layers, args, kwargs, recording)
    recording.stands_for(output, replayed)


def _run_on_shadow(
    module: nn.Module,
    layers: Mapping[int, str],
    args: tuple,
    kwargs: Mapping,
    recording: Recording | None,
) -> tuple[Recording, object]:
    """``module(*args, **kwargs)`` run on a shadow, its calls recorded into ``recording``
    (None: a new one, of the shadow as the model); the recording and the shadow's output."""
    made: dict[int, nn.Module] = {}
    shadow = _shadow(module, made)
    shadow_layers = {id(made[key]): layer for key, layer in layers.items() if key in made}
    if recording is None:
        recording = Recording(shadow_layers, shadow)
    else:
        recording.name_also(shadow_layers)
    for part in made.values():
        part.register_forward_pre_hook(lambda m, a, k: recording.begin(m, a, k), with_kwargs=True)
        part.register_forward_hook(lambda m, a, k, out: recording.end(m, out), with_kwargs=True)
    with _apart(module, args, kwargs):
        output = shadow(*args, **kwargs)
    return recording, output
