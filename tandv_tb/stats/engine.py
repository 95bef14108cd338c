"""A tensor's statistics by the kernel ``_kernel_choice`` picks, and the one transfer per
step.

- The compiled CPU kernel (``_cpu_kernel``) reads host arrays: there is no device, so
  results are ready at once.
- The fused Triton kernels (``_triton_launch``) leave one packed result vector per torch
  tensor on its device.
- The branch-free array kernel (``_array_kernel``) leaves its small result vectors on the
  tensor's device, also inside ``jax.jit``. ``fetch`` brings all of them to the host in
  one transfer per library.

Torch, jax and numpy are imported only when a value of theirs is seen.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.stats import _kernel_choice, _xla_cpu
from tandv_tb.stats._array_kernel import JaxOps, TorchOps, compute_arrays
from tandv_tb.stats._cpu_kernel import compute_cpu
from tandv_tb.stats.inputs import float_dtype_name, untrackable_reason
from tandv_tb.stats.tensor_stats import TensorStats


@dataclasses.dataclass
class Pending:
    """Statistics of one tensor: ``ready`` on the host, or ``counts``/``moments`` vectors
    (``record.engine_layout``) still on the tensor's device, with no host sync yet, or
    (the Triton kernels) both packed in one int64 vector at ``offset`` in ``packed``
    (``_triton_launch.unpack``), which many tensors may share."""

    dtype: str
    formats: tuple[str, ...]
    ready: TensorStats | None = None
    counts: object = None
    moments: object = None
    packed: object = None
    offset: int = 0


@dataclasses.dataclass(frozen=True)
class Slot:
    """One tensor's statistics in a ``Packed`` result: the ``Pending`` vectors' dtype,
    formats and lengths, and ``label``, what the caller knows the tensor by."""

    label: object
    dtype: str
    formats: tuple[str, ...]
    n_counts: int
    n_moments: int


@dataclasses.dataclass
class Packed:
    """Statistics of several tensors that one compiled program computed, still on its
    device: their ``Pending`` vectors end to end in ``counts`` and ``moments``, laid out
    by ``layouts[layout]``. ``layout`` is on the device too: a program traced again (new
    shapes, another branch) records other tensors, so which layout a result has is known
    once it is on the host (``fetch``)."""

    layouts: Sequence[Sequence[Slot]]
    layout: object
    counts: object
    moments: object

    def unpack(self, layout: int, counts: np.ndarray, moments: np.ndarray) -> list:
        """The host values of the result: ``(label, TensorStats)`` per slot."""
        slots = self.layouts[int(layout)]
        count_ends = np.cumsum([s.n_counts for s in slots], dtype=np.int64)
        moment_ends = np.cumsum([s.n_moments for s in slots], dtype=np.int64)
        return [
            (
                s.label,
                TensorStats.unpack(
                    s.dtype,
                    s.formats,
                    counts[c_end - s.n_counts : c_end],
                    moments[m_end - s.n_moments : m_end],
                ),
            )
            for s, c_end, m_end in zip(slots, count_ends, moment_ends)
        ]


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
        kernel = _kernel_choice.torch_kernel(tensor, formats)
        return _compute_torch(tensor, formats, threads, kernel)
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


def _compute_torch(tensor, formats: tuple[str, ...], threads: int | None, kernel: str) -> Pending:
    """A torch tensor's statistics by ``kernel`` (``_kernel_choice.torch_kernel``'s)."""
    import torch

    dtype = float_dtype_name(tensor.dtype)
    wide = torch.float64 if dtype == "float64" else torch.float32
    if kernel == "triton":  # reads the memory: no detached view needed
        try:
            return _compute_triton(tensor, dtype, formats)
        except Exception as error:  # a GPU Triton cannot compile for, say: never a crash
            _kernel_choice.failed(error)
            kernel = "array"
    values = tensor.detach()
    row_length = _row_length(values)
    if kernel == "cpu" and not values.is_cpu:
        values = values.cpu()  # asked for: a sync
    if kernel == "cpu":  # numpy reads it in place (a strided one is copied by compute_cpu)
        if dtype == "bfloat16":
            host = values.view(torch.int16).numpy().view(np.uint16)
        else:
            host = (values if values.dtype == wide else values.to(wide)).numpy()
        stats = compute_cpu(host, dtype, formats, threads, row_length)
        return Pending(dtype, formats, ready=stats)
    flat = values.reshape(-1).to(wide)
    counts, moments = compute_arrays(_torch_ops(), flat, dtype, formats, row_length)
    return Pending(dtype, formats, counts=counts, moments=moments)


def _compute_triton(values, dtype: str, formats: tuple[str, ...]) -> Pending:
    """The Triton kernels' launches for one tensor (two or three), into a slice of the
    device's output arena (``_triton_runtime.Arena``: no allocation of its own)."""
    launch = _kernel_choice.triton_launch()
    packed, offset = launch.arena(values.device).take(launch.packed_length(dtype, formats))
    launch.compute_into(values, formats, packed, offset)
    return Pending(dtype, formats, packed=packed, offset=offset)


def compute_many(
    tensors: Sequence, formats: Sequence[str] = (), *, threads: int | None = None
) -> list[Pending]:
    """``compute`` of many torch tensors (the weights, gradients and optimizer state read
    at ``step()``): those the Triton kernels take, in a few launches per device and dtype
    into one buffer per device; the others one by one (``threads`` as ``compute``)."""
    import torch

    formats = fmt.check_formats(formats)
    pending: list[Pending | None] = [None] * len(tensors)
    fused: dict = {}
    for i, tensor in enumerate(tensors):
        if not isinstance(tensor, torch.Tensor) or untrackable_reason(tensor) is not None:
            pending[i] = compute(tensor, formats, threads=threads)  # raises TypeError
            continue
        kernel = _kernel_choice.torch_kernel(tensor, formats)
        if kernel == "triton":
            fused.setdefault(tensor.device, []).append(i)
        else:
            pending[i] = _compute_torch(tensor, formats, threads, kernel)
    launch = _kernel_choice.triton_launch() if fused else None
    for device, members in fused.items():
        values = [tensors[i] for i in members]
        offsets = launch.packed_offsets(values, formats)
        packed, start = launch.arena(device).take(offsets[-1])
        offsets = [start + offset for offset in offsets]
        try:
            launch.compute_many_into(values, formats, packed, offsets[:-1])
        except Exception as error:  # as in ``_compute_torch``
            _kernel_choice.failed(error)
            for i in members:
                pending[i] = compute(tensors[i], formats, threads=threads)
            continue
        for i, value, offset in zip(members, values, offsets):
            pending[i] = Pending(
                float_dtype_name(value.dtype), formats, packed=packed, offset=offset
            )
    return pending


def _compute_jax(array, formats: tuple[str, ...], threads: int | None) -> Pending:
    dtype = float_dtype_name(array.dtype)
    row_length = _row_length(array)
    kernel = _kernel_choice.jax_kernel(array)
    if kernel == "traced":
        counts, moments = _traced_jax(_jax_values(array, dtype), dtype, formats, row_length)
    elif kernel == "cpu":
        host = _host_values(np.asarray(array), dtype)
        stats = compute_cpu(host, dtype, formats, threads, row_length)
        return Pending(dtype, formats, ready=stats)
    else:
        counts, moments = _jitted_jax_kernel(dtype, formats, row_length)(array)
    return Pending(dtype, formats, counts=counts, moments=moments)


def _traced_jax(values, dtype: str, formats: tuple[str, ...], row_length: int):
    """Counts and moments of a traced array in the program being traced: the array kernel,
    or, lowered for the CPU, the CPU kernel as an XLA FFI call (``_xla_cpu``) where
    ``_kernel_choice.traced_on_cpu``."""
    import jax

    def array_kernel(v):
        return compute_arrays(_jax_ops(), v, dtype, formats, row_length)

    if not _kernel_choice.traced_on_cpu():
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


def fetch(pending: Sequence[Pending | Packed]) -> list:
    """Bring many tensors' statistics to the host: one transfer per device library.

    A ``Pending`` gives its ``TensorStats``; a ``Packed`` result gives its tensors'
    ``(label, TensorStats)``, in its layout's order."""
    on_device = [p for p in pending if isinstance(p, Packed) or p.ready is None]
    torch_items = [p for p in on_device if _library(_vector(p)) == "torch"]
    jax_items = [p for p in on_device if _library(_vector(p)) == "jax"]
    host = {}
    if torch_items:
        host.update(zip(map(id, torch_items), _fetch_torch(torch_items)))
    if jax_items:
        host.update(zip(map(id, jax_items), _fetch_jax(jax_items)))
    return [host[id(p)] if isinstance(p, Packed) or p.ready is None else p.ready for p in pending]


def _fetch_jax(items: Sequence[Pending | Packed]) -> list:
    """One ``jax.device_get`` for all jax results."""
    import jax

    packed = [isinstance(p, Packed) for p in items]
    pulled = jax.device_get(
        [(p.layout, p.counts, p.moments) if is_packed else (p.counts, p.moments)
         for p, is_packed in zip(items, packed)]
    )  # fmt: skip
    return [
        p.unpack(*values) if is_packed else TensorStats.unpack(p.dtype, p.formats, *values)
        for p, is_packed, values in zip(items, packed, pulled)
    ]


def _vector(pending: Pending | Packed) -> object:
    if isinstance(pending, Packed):
        return pending.counts
    return pending.counts if pending.packed is None else pending.packed


def _library(value: object) -> str:
    module = type(value).__module__.split(".")[0]
    return "jax" if module in ("jax", "jaxlib") else module


def _fetch_torch(pending: Sequence[Pending]) -> list[TensorStats]:
    """One device-to-host copy per device for all torch results (moments as int64 bits;
    a packed buffer that many tensors share is copied once)."""
    import torch

    result = {}
    for device in {_vector(p).device for p in pending}:
        group = [(i, p) for i, p in enumerate(pending) if _vector(p).device == device]
        parts, where = [], {}  # where: the index of a pending's (first) part in parts
        used = _used_ranges(p for _, p in group if p.packed is not None)
        for i, p in group:
            key = i if p.packed is None else id(p.packed)
            if key in where:
                continue
            where[key] = len(parts)
            if p.packed is None:
                parts += [p.counts.reshape(-1), p.moments.to(torch.float64).view(torch.int64)]
            else:
                start, end = used[id(p.packed)]
                whole = start == 0 and end == p.packed.numel()
                parts.append(p.packed if whole else p.packed[start:end])
        flat = (parts[0] if len(parts) == 1 else torch.cat(parts)).cpu().numpy()
        pieces = np.split(flat, np.cumsum([part.numel() for part in parts])[:-1])
        for i, p in group:
            if p.packed is None:
                at = where[i]
                counts, moments = pieces[at], pieces[at + 1].view(np.float64)
                result[i] = TensorStats.unpack(p.dtype, p.formats, counts, moments)
            else:
                packed = pieces[where[id(p.packed)]][p.offset - used[id(p.packed)][0] :]
                result[i] = _kernel_choice.triton_launch().unpack(p.dtype, p.formats, packed)
    return [result[i] for i in range(len(pending))]


def _used_ranges(pending) -> dict[int, tuple[int, int]]:
    """Per packed buffer (by id), the range its pending results use."""
    launch = _kernel_choice.triton_launch()
    used: dict[int, tuple[int, int]] = {}
    for p in pending:
        end = p.offset + launch.packed_length(p.dtype, p.formats)
        start, stop = used.get(id(p.packed), (p.offset, end))
        used[id(p.packed)] = (min(start, p.offset), max(stop, end))
    return used


def tensor_stats(tensor: object, formats: Sequence[str] = ()) -> TensorStats:
    """``compute`` and ``fetch`` for one tensor."""
    return fetch([compute(tensor, formats)])[0]
