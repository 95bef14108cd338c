"""A run that records block-scaled formats, with crafted tensors whose fate in
``mxfp4_e2m1`` is known, written by the real ``NumericsWriter`` (the engine computes every
record), and what the tests compare it with.

Activations (blocks of 32 along the last dimension; every value of each tensor is given
by the formula below, so its counts are known by hand):

- ``exact``: every value a power of two times 1, 2, 3 or 4 within each block whose largest
  is 4 x 2**k: every value is an FP4 value at the block's scale, nothing is lost; its last
  row is zeros (3 zero blocks);
- ``spiky``: each block holds one value 1.0 and 31 of 1e-3: at the block's scale 2**-2 the
  small ones are 0.004, below FP4's smallest subnormal's half (0.25): 31 underflow a block;
- ``saturating``: every value 7.5 (the block's scale 2**0): 7.5 rounds to 8, above FP4's
  largest 6: every value saturates (none with ``:rceil``, whose scale is 2**1);
- ``tiny``: float32 subnormals about 1e-39: the scale ``2**(floor(log2) - 2)`` lies below
  2**-127, every block clamps low and every value underflows;
- ``normal``: random normal values (what the engine and the reference say).

Gradients: ``normal`` only. Steps ``STEPS``; the values change with the step (times
``2**(step % 3)``, ``tiny`` divided by it, which keeps the crafted counts).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tandv_tb.writer import NumericsWriter

BLOCKS = ("mxfp4_e2m1", "nvfp4", "mxfp8_e4m3:rceil", "mxfp4_e2m1:rceil")
FORMATS = ("float8_e4m3fn", *BLOCKS)
STEPS = range(6)
SHAPE = (4, 96)  # 3 blocks of 32 (6 of 16) per row
ACTIVATIONS = ("exact", "spiky", "saturating", "tiny", "normal")
#: Per crafted Activation: (underflow, overflow, zero_blocks, clamped_low) of mxfp4_e2m1.
MXFP4 = {
    "exact": (0, 0, 3, 0),
    "spiky": (31 * 12, 0, 0, 0),
    "saturating": (0, 4 * 96, 0, 0),
    "tiny": (4 * 96, 0, 0, 12),
}


def tensor(name: str, step: int) -> np.ndarray:
    """The values of tensor ``name`` at ``step`` (float32)."""
    scale = np.float32(2.0 ** (step % 3))
    if name == "exact":
        pattern = np.array([1.0, 2.0, 3.0, 4.0] * 8, dtype=np.float32)
        blocks = pattern[None, :] * np.float32(2.0) ** np.arange(-4, 8)[:, None]
        values = blocks.reshape(SHAPE) * scale
        values[-1] = 0
        return values.astype(np.float32)
    if name == "spiky":
        values = np.full(SHAPE, 1e-3, dtype=np.float32)
        values[:, ::32] = 1.0
        return values * scale
    if name == "saturating":
        return np.full(SHAPE, 7.5, dtype=np.float32) * scale
    if name == "tiny":  # smaller at later steps: still below the clamped scale's reach
        return np.full(SHAPE, 1e-39, dtype=np.float32) / scale
    rng = np.random.default_rng(step)
    return rng.standard_normal(SHAPE).astype(np.float32) * scale


def write_block_run(run_dir: Path, steps: range = STEPS) -> None:
    """The run: ``ACTIVATIONS`` and one Gradient, every step, all of ``FORMATS``."""
    with NumericsWriter(str(run_dir), formats=FORMATS) as writer:
        for step in steps:
            for name in ACTIVATIONS:
                writer.add_numerics(name, tensor(name, step), step)
            writer.add_numerics("normal", tensor("normal", step) * 1e-3, step, "Gradient")


def write_plain_run(run_dir: Path, steps: range = STEPS) -> None:
    """A run of the same tensors without block formats (element formats only)."""
    with NumericsWriter(str(run_dir), formats=("float8_e4m3fn",)) as writer:
        for step in steps:
            for name in ACTIVATIONS:
                writer.add_numerics(name, tensor(name, step), step)
