"""Demo data: bytes of the Python standard library's own source files (every machine has
them), cut into fixed-length training windows. Nothing is downloaded."""

from __future__ import annotations

import pathlib
import sysconfig

import numpy as np

VOCAB = 256  # byte-level model


def stdlib_bytes(limit: int = 2_000_000) -> np.ndarray:
    """Up to ``limit`` bytes of stdlib ``*.py`` files, in a fixed (sorted) order."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= limit:
            break
    return np.frombuffer(b"".join(chunks)[:limit], dtype=np.uint8)


def batches(data: np.ndarray, batch: int, seq: int, seed: int):
    """Endless random (inputs, targets) windows as int64 arrays of shape (batch, seq)."""
    rng = np.random.default_rng(seed)
    while True:
        starts = rng.integers(0, len(data) - seq - 1, batch)
        window = np.stack([data[s : s + seq + 1] for s in starts]).astype(np.int64)
        yield window[:, :-1], window[:, 1:]
