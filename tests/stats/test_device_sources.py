"""Whether this run checked the statistics computed on an accelerator (the ``torch-cuda``,
``jax-gpu`` and ``jax-jit-gpu`` sources of the engine and block-format tests)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.devices import DEVICE_SOURCES, jax_gpu


def test_the_device_sources_cover_every_accelerator_found():
    if not DEVICE_SOURCES:
        pytest.skip("no CUDA device here: the statistics tests' device sources did not run")
    assert ("torch-cuda" in DEVICE_SOURCES) == torch.cuda.is_available()
    assert ("jax-gpu" in DEVICE_SOURCES) == (jax_gpu() is not None)
