"""What the engine reads: a float tensor with values. The one check of it, used by the
engine, ``NumericsWriter.add_numerics`` and the trackers (which skip, with the reason, what
it refuses)."""

from __future__ import annotations

import functools
import sys

from tandv_tb import formats as fmt

_EXPECTED = "expected a float torch tensor, jax array or numpy array"


def untrackable_reason(tensor: object) -> str | None:
    """Why ``tensor`` is not a float tensor with values (a dense torch tensor, a jax array
    or tracer, a numpy array or scalar of a float dtype), or ``None`` when it is."""
    dtype = getattr(tensor, "dtype", None)
    if tensor is None or isinstance(tensor, str | bytes):
        return f"{_EXPECTED}, got {tensor!r}"
    if dtype is None:
        return f"{_EXPECTED}, got a {type(tensor).__name__}"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tensor, torch.Tensor):
        if tensor.layout != torch.strided:
            return f"{tensor.layout} tensors are not tracked: only dense (strided) ones"
        if tensor.is_meta:
            return f"meta tensors hold no values (shape {tuple(tensor.shape)}, {dtype})"
    if float_dtype_name(dtype) is None:
        return f"{dtype} is not a float dtype"
    return None


@functools.cache
def float_dtype_name(dtype: object) -> str | None:
    """The ml_dtypes name of a float dtype (numpy, torch or jax), ``None`` for any other."""
    try:
        name = fmt.canonical_name(dtype)
    except (TypeError, ValueError):
        return None
    return name if fmt.numpy_dtype(name).kind in "fV" else None
