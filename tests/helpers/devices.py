"""The accelerators a test run can reach. The statistics tests add a source per one found
(``DEVICE_SOURCES``); without one those sources are not collected, and
``tests/stats/test_device_sources.py`` says so in one skip."""

from __future__ import annotations

import jax
import torch


def jax_gpu() -> jax.Device | None:
    """jax's first GPU, or None (jax without its CUDA plugin, or no device)."""
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        return None


def jax_cpu() -> jax.Device:
    """jax's CPU, named: where an accelerator is jax's default, the CPU sources stay on it."""
    return jax.devices("cpu")[0]


DEVICE_SOURCES = (["torch-cuda"] if torch.cuda.is_available() else []) + (
    ["jax-gpu", "jax-jit-gpu"] if jax_gpu() is not None else []
)
