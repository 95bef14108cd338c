"""Which kernel computes a tensor's statistics, for every framework: the one place that
decides, and the ``TANDV_TB_KERNEL`` switch.

- numpy arrays: the compiled CPU kernel, always.
- jax arrays (``jax_kernel``): the CPU kernel for an array wholly in this process's host
  memory; inside ``jax.jit`` (a tracer) the traced program's own kernel, the CPU kernel
  as an XLA FFI call where it is lowered for a one-device CPU (``traced_on_cpu``), else
  the branch-free array kernel; the array kernel for every other array, on its devices.
- torch tensors (``torch_kernel``), by the switch:

  - ``auto`` (default): the CPU kernel for host tensors; the Triton kernel for CUDA
    tensors where ``triton`` imports; else the array kernel.
  - ``cpu``: the CPU kernel for every tensor (a device tensor is copied to the host
    first: a sync per tensor).
  - ``array``: the array kernel for every tensor.
  - ``triton``: the Triton kernel for every tensor it can take. It runs on CUDA tensors,
    or, with ``TRITON_INTERPRET=1``, on CPU tensors in Triton's interpreter (whose results
    stay pending like a device's until ``fetch``). Triton reads torch tensors only: numpy
    and jax arrays keep the rules above under every value of the switch.

A tensor the Triton kernel cannot take (a dtype it does not read, values not dense in
memory, a CUDA device that is not the current one) goes to the array kernel: counted
(``fallbacks``) and warned once per reason, never wrong. Without ``triton`` installed a
CUDA tensor goes to the array kernel with one warning naming ``pip install triton``; where
a launch fails (Triton cannot compile for this GPU, say: ``failed``), that one and every
later tensor do too. An unknown value raises ``ValueError`` naming the allowed ones, at
the first tensor (the PyTorch tracker checks it at ``track``).

The torch tracker's non-finite watch follows the switch too (``watch_kernel``): the Triton
watch kernel where the statistics would take the Triton kernels (where it cannot take a
tensor, torch operations on the tensor's device, counted and warned as above); torch
operations on the tensor's device under ``array``; the host's own reading of CPU tensors
under ``auto`` and ``cpu``.
"""

from __future__ import annotations

import collections
import functools
import importlib
import os
import warnings

from tandv_tb.stats import _xla_cpu

#: The environment variable, and the values it takes.
ENV = "TANDV_TB_KERNEL"
CHOICES = ("auto", "cpu", "array", "triton")

#: Tensors sent to the array kernel because the Triton kernel could not take them, by
#: reason (a process-wide tally; each reason is warned about once).
fallbacks: collections.Counter = collections.Counter()
_STATISTICS_INSTEAD = "computes its statistics with the array kernel instead of the Triton kernel"
#: Why the Triton kernels are not used any more in this process (``failed``), or "".
_broken = ""


def setting() -> str:
    """The switch's value (read at each call, so that it may change between runs: a
    test's ``monkeypatch.setenv`` takes effect at once)."""
    return _parsed(os.environ.get(ENV, ""))


@functools.cache
def _parsed(raw: str) -> str:
    value = raw.strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{ENV}={raw!r} is not a kernel: expected one of {', '.join(CHOICES)}")
    return value


@functools.cache
def triton_launch():
    """The Triton launch module, or ``None`` where ``triton`` does not import (warned
    once)."""
    try:
        launch = importlib.import_module("tandv_tb.stats._triton_launch")
    except ImportError as error:
        warnings.warn(
            f"triton is not importable ({error}): tandv_tb computes statistics of CUDA "
            "tensors with its array kernel, many small operations per tensor; "
            "`pip install triton` for its fused kernels",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    return launch


@functools.cache
def triton_watch():
    """The Triton watch module, or ``None`` where ``triton`` does not import (warned once,
    by ``triton_launch``)."""
    if triton_launch() is None:
        return None
    return importlib.import_module("tandv_tb.stats._triton_watch")


def watch_kernel(tensor, choice: str | None = None) -> str:
    """How the non-finite watch reads a torch tensor under the switch (``choice``, where
    the caller read ``setting()`` already): ``cpu`` (a host tensor under ``auto`` or
    ``cpu``: read at once on the host), ``triton`` (the Triton watch kernel) or ``array``
    (torch operations on the tensor's device, read at ``step()``: every tensor under
    ``array``)."""
    choice = choice or setting()
    if choice != "triton":
        if tensor.is_cpu:
            return "array" if choice == "array" else "cpu"
        if choice != "auto" or not tensor.is_cuda:
            return "array"
    module = triton_watch()
    if module is None or _broken:
        return "array"
    reason = module.unsupported_reason(tensor)
    if reason is None:
        return "triton"
    _fall_back(reason, "watches it for NaN/Inf with torch operations instead of the Triton watch")
    return "array"


def torch_kernel(tensor, formats: tuple[str, ...]) -> str:
    """``cpu``, ``array`` or ``triton``: the kernel for a torch tensor under the switch."""
    choice = setting()
    if choice in ("cpu", "array"):
        return choice
    if choice == "auto" and tensor.device.type == "cpu":
        return "cpu"
    if choice == "auto" and tensor.device.type != "cuda":
        return "array"
    launch = triton_launch()
    if launch is None or _broken:
        return "array"
    reason = launch.unsupported_reason(tensor, formats)
    if reason is None:
        return "triton"
    _fall_back(reason)
    return "array"


def jax_kernel(array) -> str:
    """``cpu``, ``array`` or ``traced`` (a tracer: the kernel is the traced program's,
    ``traced_on_cpu``): the kernel for a jax array. Under ``jax.distributed`` a global
    array also spans other processes' CPUs: not in this host's memory, so ``array``."""
    import jax

    if isinstance(array, jax.core.Tracer):
        return "traced"
    on_host = array.is_fully_addressable and all(d.platform == "cpu" for d in array.devices())
    return "cpu" if on_host else "array"


def traced_on_cpu() -> bool:
    """Whether a traced program lowered for the CPU computes statistics by the CPU kernel
    as an XLA FFI call (faster there) rather than by the array kernel: where the process
    has one device. With several, XLA partitions the array kernel over a sharded array,
    and would gather one for the call."""
    import jax

    return jax.device_count() == 1 and _xla_cpu.ready()


def _fall_back(reason: str, instead: str = _STATISTICS_INSTEAD) -> None:
    fallbacks[reason] += 1
    if fallbacks[reason] == 1:
        warnings.warn(
            f"{reason}: tandv_tb {instead} (same results, more operations); further such "
            "tensors are counted in tandv_tb.stats._kernel_choice.fallbacks",
            RuntimeWarning,
            stacklevel=4,
        )


def failed(error: BaseException) -> None:
    """A launch of the Triton kernels raised ``error``: the array kernel from now on, for
    this tensor too (warned once). Tracking must not stop training."""
    global _broken
    _broken = f"the Triton kernels failed ({type(error).__name__}: {error})"
    _fall_back(_broken)
