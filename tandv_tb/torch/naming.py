"""Names of tracked tensors: module paths without wrappers, and one name per output tensor."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping

import torch
from torch import nn

from tandv_tb.tracking.leaf_names import map_leaves, named_leaves

#: Attributes through which wrappers (FSDP, torch.compile, activation checkpointing) hold
#: the module they wrap; they add nothing to a name. Private (torch has no public way to
#: unwrap them), pinned by tests/project/test_private_api_pins.py.
_WRAPPED_ATTRIBUTES = ("_fsdp_wrapped_module", "_orig_mod", "_checkpoint_wrapped_module")


def _wrapped(module: nn.Module) -> nn.Module | None:
    """The module a wrapper wraps, or ``None`` when ``module`` is no wrapper."""
    if isinstance(module, nn.parallel.DistributedDataParallel):
        return module.module
    for attribute in _WRAPPED_ATTRIBUTES:
        inner = module._modules.get(attribute)
        if inner is not None:
            return inner
    return None


def unwrap(module: nn.Module) -> nn.Module:
    """The user's model inside any number of wrappers."""
    inner = _wrapped(module)
    return module if inner is None else unwrap(inner)


def wrappers(module: nn.Module) -> list[nn.Module]:
    """The wrappers around the user's model (``unwrap``), outermost first."""
    found = []
    inner = _wrapped(module)
    while inner is not None:
        found.append(module)
        module, inner = inner, _wrapped(inner)
    return found


def root_name(module: nn.Module) -> str:
    """The name of the root module's own output: its class name (``GPT``, ``Sequential``;
    ``GPT`` too once FSDP2's ``fully_shard`` has made it an ``FSDPGPT``)."""
    return module_type(unwrap(module))


def module_type(module: nn.Module) -> str:
    """The module's class name; FSDP2's ``FSDPLinear`` (made by ``fully_shard``) is ``Linear``."""
    name = type(module).__name__
    fsdp = sys.modules.get("torch.distributed.fsdp")  # loaded by whoever uses fully_shard
    fsdp_module = getattr(fsdp, "FSDPModule", None)
    if fsdp_module is not None and isinstance(module, fsdp_module) and name.startswith("FSDP"):
        return name.removeprefix("FSDP")
    return name


def named_modules(root: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """``(path, module)`` for every module once, wrappers skipped, paths without them.

    The root's path is ``""``; a module reachable by several paths keeps its first.
    """
    seen: set[int] = set()

    def walk(module: nn.Module, path: str) -> Iterator[tuple[str, nn.Module]]:
        inner = _wrapped(module)
        if inner is not None:
            yield from walk(inner, path)
            return
        if id(module) in seen:
            return
        seen.add(id(module))
        yield path, module
        for attribute, child in module._modules.items():
            if child is not None:
                yield from walk(child, f"{path}.{attribute}" if path else attribute)

    yield from walk(root, "")


def named_parameters(root: nn.Module) -> Iterator[tuple[str, nn.Parameter, nn.Module]]:
    """``(name, parameter, owner)`` in registration order, each parameter once."""
    seen: set[int] = set()
    for path, module in named_modules(root):
        for attribute, parameter in module._parameters.items():
            if parameter is None or id(parameter) in seen:
                continue
            seen.add(id(parameter))
            yield (f"{path}.{attribute}" if path else attribute), parameter, module


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)


def output_tensors(output: object, name: str) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for every tensor in a module's output, named by
    ``tandv_tb.tracking.leaf_names`` (``name``, ``name.1``, ... in a tuple; ``name.<key>``
    in a dict)."""
    return named_leaves(output, name, _is_tensor)


def map_output_tensors(
    output: object, name: str, fn: Callable[[str, torch.Tensor], torch.Tensor]
) -> object:
    """``output`` rebuilt with each tensor replaced by ``fn(its name, tensor)``, named as
    ``output_tensors`` names them."""
    return map_leaves(output, name, _is_tensor, fn)


def input_tensors(args: tuple, kwargs: Mapping, name: str) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for every tensor in a module's inputs: the positional ones named as
    a tuple output's (``name``, ``name.1``, ...), then the keyword ones ``name.<keyword>``."""
    yield from output_tensors(args, name)
    yield from output_tensors(kwargs, name)


def distinct_names(
    leaves: list[tuple[str, torch.Tensor]], name: str, module_paths: set[str]
) -> list[tuple[str, torch.Tensor]]:
    """``leaves`` of the value named ``name``; where one of their names is also a module's
    (``seq.1`` of a Sequential's tuple output), all but ``name`` are ``seq[1]``, ``seq[2]``..."""
    if not any(leaf != name and leaf in module_paths for leaf, _ in leaves):
        return leaves
    cut = len(name) + 1
    return [(f"{name}[{leaf[cut:]}]" if leaf != name else leaf, t) for leaf, t in leaves]
