"""Arrays that are not tracked: silently (scalar counters) or with one warning per name."""

from __future__ import annotations

import enum

import jax
import numpy as np


class UntrackableArrayWarning(UserWarning):
    """An array was skipped (tracking goes on without it)."""


class Verdict(enum.Enum):
    TRACK = "track"
    SILENT = "silent"  # not an array, an empty pytree node, a scalar counter


def untrackable(value: object, *, skip_scalars: bool) -> Verdict | str:
    """``Verdict.TRACK`` for a float array, ``Verdict.SILENT`` for what is skipped without a
    word (non-arrays, integer scalars, and any scalar when ``skip_scalars``), else the reason
    the array is skipped (a PRNG key, an integer array)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or not isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return Verdict.SILENT
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return "a PRNG key holds no float values"
    is_float = jax.dtypes.issubdtype(dtype, np.floating)
    if np.ndim(value) == 0 and (skip_scalars or not is_float):
        return Verdict.SILENT
    if not is_float:
        return f"{dtype} is not a float dtype"
    return Verdict.TRACK
