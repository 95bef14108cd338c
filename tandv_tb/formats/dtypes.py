"""Float dtypes: their names, exponent ranges and limits (``info``).

A dtype (or an element format) is any name ``ml_dtypes.finfo`` accepts: ``float32``,
``bfloat16``, ``float8_e4m3fn``, ``float4_e2m1fn``, ... ``numpy_dtype`` is the one check of
such a name and ``canonical_name`` the one reading of a numpy, torch or jax dtype.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import sys

import ml_dtypes
import numpy as np

#: The low-precision formats the dashboards overlay when nothing else is asked for.
DEFAULT_OVERLAYS = ("float8_e4m3fn", "float8_e5m2")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype for a float format name; ``ValueError`` for anything else."""
    if not isinstance(name, str):
        raise TypeError(f"a format is named by a string, got {type(name).__name__}")
    candidate = getattr(ml_dtypes, name, None)
    try:
        dtype = np.dtype(candidate if candidate is not None else name)
        ml_dtypes.finfo(dtype)
    except (TypeError, ValueError, SyntaxError):  # numpy parses some names ("039") as code
        raise ValueError(
            f"unknown float format {name!r}: expected a name ml_dtypes.finfo accepts, "
            "such as 'float32', 'bfloat16' or 'float8_e4m3fn'"
        ) from None
    return dtype


def canonical_name(dtype: object) -> str:
    """The ml_dtypes name of a numpy/torch/jax float dtype or of a format name."""
    text = str(dtype)
    for prefix in ("torch.", "dtype(", "<class 'numpy."):
        text = text.removeprefix(prefix)
    text = text.strip("')")
    return numpy_dtype(text).name


@dataclasses.dataclass(frozen=True)
class FormatInfo:
    """Exponent range and limits of one float format."""

    name: str
    bits: int
    min_exponent: int  # floor(log2(smallest subnormal)): the lowest histogram bin
    max_exponent: int  # floor(log2(largest finite)): the highest histogram bin
    smallest_subnormal: float
    smallest_normal: float
    max: float
    has_inf: bool
    has_nan: bool

    @property
    def n_bins(self) -> int:
        return self.max_exponent - self.min_exponent + 1


@functools.cache
def info(name: str) -> FormatInfo:
    """Exponent range and limits of the format ``name``."""
    dtype = numpy_dtype(name)
    with gradual_underflow():
        fi = ml_dtypes.finfo(dtype)
        specials = np.array([np.inf, np.nan], dtype=np.float32).astype(dtype)
        specials = specials.astype(np.float64)
        return FormatInfo(
            name=dtype.name,
            bits=int(fi.bits),
            min_exponent=int(fi.minexp) - int(fi.nmant),
            max_exponent=int(fi.maxexp) - 1,
            smallest_subnormal=math.ldexp(1.0, int(fi.minexp) - int(fi.nmant)),
            smallest_normal=float(fi.smallest_normal),
            max=float(fi.max),
            has_inf=bool(np.isinf(specials[0])),
            has_nan=bool(np.isnan(specials[1])),
        )


@contextlib.contextmanager
def gradual_underflow():
    """Compute with subnormals intact even if ``torch.set_flush_denormal(True)`` is on:
    the casts that define the thresholds must see subnormals as they are."""
    tiny = np.array([1], dtype=np.uint32).view(np.float32)
    flushing = bool((tiny * np.float32(1.0))[0] == 0)
    torch = sys.modules.get("torch")
    if not flushing or torch is None:
        yield
        return
    torch.set_flush_denormal(False)
    try:
        yield
    finally:
        torch.set_flush_denormal(True)
