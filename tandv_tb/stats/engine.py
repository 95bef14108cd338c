"""Which kernel computes a tensor's statistics, and the one transfer per step.

- Host arrays (numpy, torch CPU tensors, jax arrays on the CPU) go to the compiled CPU
  kernel (``_cpu_kernel``): there is no device, so results are ready at once.
- Tensors on an accelerator and jax tracers (inside ``jax.jit``) go to the branch-free
  array kernel (``_array_kernel``), which leaves its small result vectors on the device.
  ``fetch`` brings all of them to the host in one transfer per library.

Torch, jax and numpy are imported only when a value of theirs is seen.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.stats import _xla_cpu
from tandv_tb.stats._array_kernel import JaxOps, TorchOps, compute_arrays
from tandv_tb.stats._cpu_kernel import compute_cpu
from tandv_tb.stats.inputs import float_dtype_name, untrackable_reason
from tandv_tb.stats.tensor_stats import TensorStats


@dataclasses.dataclass
class Pending:
    """Statistics of one tensor: ``ready`` on the host, or ``counts``/``moments`` vectors
    (``record.engine_layout``) still on the tensor's device, with no host sync yet."""

    dtype: str
    formats: tuple[str, ...]
    ready: TensorStats | None = None
    counts: object = None
    moments: object = None


def compute(tensor: object, formats: Sequence[str] = (), *, threads: int | None = None) -> Pending:
    """Start computing a float tensor's statistics on its own device, without a sync.

    Accepts torch tensors, jax arrays (also tracers inside ``jax.jit``) and numpy arrays
    of any float dtype. Raises ``TypeError`` naming what it got for anything else
    (integer, bool, complex, strings, None, meta or sparse tensors: ``inputs``).
    ``formats`` are checked by ``formats.check_formats``; block formats take their blocks
    along the tensor's last dimension. ``threads`` caps the threads of the CPU kernel
    (``_cpu_kernel.compute_cpu``; default: one per core).
    """
    formats = fmt.check_formats(formats)
    module = type(tensor).__module__.split(".")[0]
    reason = untrackable_reason(tensor)
    if reason is not None or module not in ("torch", "jax", "jaxlib", "numpy"):
        raise TypeError(reason or f"expected a float tensor, got a {type(tensor).__name__}")
    if module == "torch":
        return _compute_torch(tensor, formats, threads)
    if module in ("jax", "jaxlib"):
        return _compute_jax(tensor, formats, threads)
    return _compute_numpy(np.asarray(tensor), formats, threads)


def _row_length(tensor: object) -> int:
    """The length of the rows along which block formats take their blocks (the last
    dimension; a 0-d tensor is one row of one value)."""
    shape = tuple(tensor.shape)
    return int(shape[-1]) if shape else 1


def _host_values(values: np.ndarray, dtype: str) -> np.ndarray:
    """What the CPU kernel reads (``compute_cpu``): bfloat16 as its bit patterns."""
    if dtype == "bfloat16":
        return values.reshape(-1).view(np.uint16)
    wide = np.float64 if dtype == "float64" else np.float32
    return values.reshape(-1).astype(wide, copy=False)


def _compute_numpy(array: np.ndarray, formats: tuple[str, ...], threads: int | None) -> Pending:
    dtype = float_dtype_name(array.dtype)
    host = _host_values(array, dtype)
    stats = compute_cpu(host, dtype, formats, threads, _row_length(array))
    return Pending(dtype, formats, ready=stats)


def _compute_torch(tensor, formats: tuple[str, ...], threads: int | None) -> Pending:
    import torch

    dtype = float_dtype_name(tensor.dtype)
    wide = torch.float64 if dtype == "float64" else torch.float32
    values = tensor.detach()
    row_length = _row_length(values)
    if values.is_cpu:  # numpy reads it in place (a strided one is copied by compute_cpu)
        if dtype == "bfloat16":
            host = values.view(torch.int16).numpy().view(np.uint16)
        else:
            host = (values if values.dtype == wide else values.to(wide)).numpy()
        stats = compute_cpu(host, dtype, formats, threads, row_length)
        return Pending(dtype, formats, ready=stats)
    flat = values.reshape(-1).to(wide)
    counts, moments = compute_arrays(_torch_ops(), flat, dtype, formats, row_length)
    return Pending(dtype, formats, counts=counts, moments=moments)


def _compute_jax(array, formats: tuple[str, ...], threads: int | None) -> Pending:
    import jax

    dtype = float_dtype_name(array.dtype)
    row_length = _row_length(array)
    if isinstance(array, jax.core.Tracer):
        counts, moments = _traced_jax(_jax_values(array, dtype), dtype, formats, row_length)
    elif all(device.platform == "cpu" for device in array.devices()):
        host = _host_values(np.asarray(array), dtype)
        stats = compute_cpu(host, dtype, formats, threads, row_length)
        return Pending(dtype, formats, ready=stats)
    else:
        counts, moments = _jitted_jax_kernel(dtype, formats, row_length)(array)
    return Pending(dtype, formats, counts=counts, moments=moments)


def _traced_jax(values, dtype: str, formats: tuple[str, ...], row_length: int):
    """Counts and moments of a traced array in the program being traced: the array kernel,
    or, lowered for the CPU where the process has one device, the CPU kernel as an XLA FFI
    call (``_xla_cpu``: faster there). With several devices the array kernel
    stays, since XLA partitions it over a sharded array and would gather one for the call.
    """
    import jax

    def array_kernel(v):
        return compute_arrays(_jax_ops(), v, dtype, formats, row_length)

    if jax.device_count() > 1 or not _xla_cpu.ready():
        return array_kernel(values)

    def cpu_kernel(v):
        return _xla_cpu.compute(v, dtype, formats, row_length)

    return jax.lax.platform_dependent(values, cpu=cpu_kernel, default=array_kernel)


def _jax_values(array, dtype: str):
    import jax.numpy as jnp

    return jnp.ravel(array).astype(jnp.float64 if dtype == "float64" else jnp.float32)


@functools.cache
def _jitted_jax_kernel(dtype: str, formats: tuple[str, ...], row_length: int):
    import jax

    def kernel(array):
        return compute_arrays(_jax_ops(), _jax_values(array, dtype), dtype, formats, row_length)

    return jax.jit(kernel)


@functools.cache
def _torch_ops() -> TorchOps:
    return TorchOps()


@functools.cache
def _jax_ops() -> JaxOps:
    return JaxOps()


def fetch(pending: Sequence[Pending]) -> list[TensorStats]:
    """Bring many tensors' statistics to the host: one transfer per device library."""
    on_device = [p for p in pending if p.ready is None]
    torch_items = [p for p in on_device if _library(p.counts) == "torch"]
    jax_items = [p for p in on_device if _library(p.counts) == "jax"]
    host = {}
    if torch_items:
        host.update(zip(map(id, torch_items), _fetch_torch(torch_items)))
    if jax_items:
        import jax

        pairs = jax.device_get([(p.counts, p.moments) for p in jax_items])
        host.update(zip(map(id, jax_items), pairs))
    return [
        p.ready if p.ready is not None else TensorStats.unpack(p.dtype, p.formats, *host[id(p)])
        for p in pending
    ]


def _library(value: object) -> str:
    module = type(value).__module__.split(".")[0]
    return "jax" if module in ("jax", "jaxlib") else module


def _fetch_torch(pending: Sequence[Pending]) -> list[tuple[np.ndarray, np.ndarray]]:
    """One device-to-host copy per device for all torch results (moments as int64 bits)."""
    import torch

    result = {}
    for device in {p.counts.device for p in pending}:
        group = [(i, p) for i, p in enumerate(pending) if p.counts.device == device]
        parts = []
        for _, p in group:
            parts += [p.counts.reshape(-1), p.moments.to(torch.float64).view(torch.int64)]
        flat = torch.cat(parts).cpu().numpy()
        pieces = np.split(flat, np.cumsum([part.numel() for part in parts])[:-1])
        for k, (i, _) in enumerate(group):
            result[i] = (pieces[2 * k], pieces[2 * k + 1].view(np.float64))
    return [result[i] for i in range(len(pending))]


def tensor_stats(tensor: object, formats: Sequence[str] = ()) -> TensorStats:
    """``compute`` and ``fetch`` for one tensor."""
    return fetch([compute(tensor, formats)])[0]
