"""``_exact_division.divide_float32`` against numpy's float32 division (IEEE 754, rounded to
nearest even), on jax's CPU and on a GPU where there is one (whose own division is
approximate): random bit patterns over the whole range, subnormal and overflowing
quotients, ties, and the special values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tandv_tb.stats._exact_division import divide_float32
from tests.helpers.devices import jax_cpu, jax_gpu

DEVICES = ["cpu", *(["gpu"] if jax_gpu() is not None else [])]


def operands() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    patterns = rng.integers(0, 2**32, size=(2, 400_000), dtype=np.uint64).astype(np.uint32)
    a, b = patterns.view(np.float32)
    near = rng.standard_normal(100_000).astype(np.float32)  # quotients near 1
    crafted = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 3.0, 448.0, 2688.0, 6.0,
         np.finfo(np.float32).max, np.finfo(np.float32).tiny, np.float32(2.0**-149),
         np.float32(2.0**-148) * 3],
        dtype=np.float32,
    )  # fmt: skip
    grid_a, grid_b = (x.reshape(-1) for x in np.meshgrid(crafted, crafted))
    # Quotients at exactly half the smallest subnormal and the ties above it.
    ties_a = np.float32(2.0**-126) * np.arange(1, 9, dtype=np.float32)
    ties_b = np.full(8, 2.0**24, np.float32)
    a = np.concatenate([a, near * 7, grid_a, ties_a, [np.float32(3163.328613)]])
    b = np.concatenate([b, near * 7 + np.float32(1e-3), grid_b, ties_b, [np.float32(3163.328613)]])
    return a.astype(np.float32), b.astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_division_is_correctly_rounded(device):
    a, b = operands()
    place = jax_gpu() if device == "gpu" else jax_cpu()
    divide = jax.jit(lambda x, y: divide_float32(jnp, jax.lax, x, y))
    got = np.asarray(divide(jax.device_put(a, place), jax.device_put(b, place)))
    with np.errstate(all="ignore"):
        want = a / b
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    wrong = np.flatnonzero(~same)
    assert wrong.size == 0, [(a[i], b[i], got[i], want[i]) for i in wrong[:5]]
