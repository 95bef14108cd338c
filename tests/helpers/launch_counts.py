"""Counting what the engine dispatches: Triton kernel launches and torch operations.

Launches are counted by a hook Triton itself provides on every kernel,
``add_pre_run_hook`` (called once per launch, compiled or interpreted). Torch operations
are counted by a ``TorchDispatchMode`` (everything that reaches an ATen kernel: views and
allocations included), less those that Triton's interpreter dispatches itself to copy a
kernel's arguments to and from the host (it runs kernels on host copies; on a GPU a
launch dispatches no torch operation).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys

from torch.utils._python_dispatch import TorchDispatchMode

_INTERPRETER = os.path.join("triton", "runtime", "interpreter.py")


@dataclasses.dataclass
class Counts:
    launches: list[str] = dataclasses.field(default_factory=list)
    operations: list[str] = dataclasses.field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.launches) + len(self.operations)


class _Operations(TorchDispatchMode):
    def __init__(self, counts: Counts) -> None:
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not _in_interpreter():
            self.counts.operations.append(str(func))
        return func(*args, **(kwargs or {}))


def _in_interpreter() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_INTERPRETER):
            return True
        frame = frame.f_back
    return False


def _kernels() -> tuple:
    from tandv_tb.stats import _triton_launch, _triton_watch

    return (*_triton_launch.KERNELS, _triton_watch.watch_kernel)


@contextlib.contextmanager
def counting():
    """Yields a ``Counts`` of the launches and torch operations inside the block."""
    counts = Counts()
    hooks = []
    for kernel in _kernels():

        def hook(*args, _name=kernel.__name__, **kwargs):
            counts.launches.append(_name)

        kernel.add_pre_run_hook(hook)
        hooks.append((kernel, hook))
    try:
        with _Operations(counts):
            yield counts
    finally:
        for kernel, hook in hooks:
            kernel.pre_run_hooks.remove(hook)
