"""The engine's sources, as the statistics tests compute a tensor's statistics through each:
``numpy``, ``torch`` (the CPU kernel), ``torch-device-kernel`` (the accelerators'
branch-free kernel, run on the CPU), ``jax`` and ``jax-jit`` on jax's CPU (the CPU kernel,
under ``jax.jit`` as an XLA FFI call), ``jax-jit-device-kernel`` (the branch-free kernel
under ``jax.jit``), ``torch-triton`` (the Triton kernels: on a GPU, or in Triton's
interpreter; ``triton_source.TRITON_SOURCES``), and where there is a GPU ``torch-cuda``,
``jax-gpu``, ``jax-jit-gpu`` (``devices.DEVICE_SOURCES``)."""

from __future__ import annotations

import functools

import jax
import numpy as np
import torch

from tandv_tb.stats import engine
from tandv_tb.stats._array_kernel import JaxOps, TorchOps, compute_arrays
from tandv_tb.stats.tensor_stats import TensorStats
from tests.helpers import triton_source
from tests.helpers.devices import jax_cpu, jax_gpu
from tests.helpers.reference import torch_tensor


def stats_from(source: str, values: np.ndarray, formats: tuple[str, ...]) -> TensorStats:
    """The statistics of ``values`` (any float dtype), through ``source``; block formats
    take their blocks along the last dimension."""
    dtype = values.dtype.name
    row = values.shape[-1] if values.ndim else 1
    if source == "numpy":
        return engine.tensor_stats(values, formats)
    if source == "torch":
        return engine.tensor_stats(torch_tensor(values), formats)
    if source == "torch-device-kernel":
        wide = torch.float64 if dtype == "float64" else torch.float32
        flat = torch_tensor(values).reshape(-1).to(wide)
        counts, moments = compute_arrays(TorchOps(), flat, dtype, formats, row)
        return TensorStats.unpack(dtype, formats, counts.numpy(), moments.numpy())
    if source == "torch-triton":
        return triton_source.triton_stats(values, formats)
    if source == "torch-cuda":
        return engine.tensor_stats(torch_tensor(values).cuda(), formats)
    array = jax.device_put(values, jax_gpu() if source.endswith("-gpu") else jax_cpu())
    if source in ("jax", "jax-gpu"):
        return engine.tensor_stats(array, formats)
    if source in ("jax-jit", "jax-jit-gpu"):
        counts, moments = jitted(formats)(array)
    elif source == "jax-jit-device-kernel":
        counts, moments = jitted_device_kernel(dtype, formats)(array)
    else:
        raise AssertionError(source)
    return TensorStats.unpack(dtype, formats, np.asarray(counts), np.asarray(moments))


def float32_sums(source: str, dtype: str) -> bool:
    """Sources whose moments are summed, or handed out, in float32 (the array kernel on
    float32 data, also on an accelerator; the Triton kernels' tiles; jax without x64 under
    ``jax.jit``)."""
    array_kernel = ("torch-device-kernel", "torch-cuda", "torch-triton", "jax-jit", "jax-gpu")
    return source.startswith(array_kernel) and dtype != "float64"


@functools.cache
def jitted(formats: tuple[str, ...]):
    """``engine.compute`` under ``jax.jit``: (counts, moments)."""

    def kernel(x):
        pending = engine.compute(x, formats)
        return pending.counts, pending.moments

    return jax.jit(kernel)


@functools.cache
def jitted_device_kernel(dtype: str, formats: tuple[str, ...]):
    """The branch-free kernel under ``jax.jit``: (counts, moments)."""

    def kernel(x):
        row = x.shape[-1] if x.ndim else 1
        return compute_arrays(JaxOps(), engine._jax_values(x, dtype), dtype, formats, row)

    return jax.jit(kernel)
