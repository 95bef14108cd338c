"""An independent reference for the block-scaled formats (docs/contract.md, "Block-scaled
formats"): numpy float64 and ml_dtypes casts, one block at a time as the definitions read,
sharing no code with the package.

``block_reference(values, name)`` gives, for a tensor of any float dtype, what the engine
records for block format ``name``: the counts, the scale exponents of the blocks that hold
a finite non-zero value, and the sums of squares of the values and of their quantization
errors, exact (``math.fsum``), in units of ``4**exponent`` with ``exponent`` the floor of
log2 of the tensor's largest finite magnitude.
"""

from __future__ import annotations

import collections
import dataclasses
import math

import ml_dtypes
import numpy as np

#: name: (element dtype, block size).
ELEMENTS = {
    "mxfp8_e4m3": (ml_dtypes.float8_e4m3fn, 32),
    "mxfp8_e5m2": (ml_dtypes.float8_e5m2, 32),
    "mxfp6_e3m2": (ml_dtypes.float6_e3m2fn, 32),
    "mxfp6_e2m3": (ml_dtypes.float6_e2m3fn, 32),
    "mxfp4_e2m1": (ml_dtypes.float4_e2m1fn, 32),
    "nvfp4": (ml_dtypes.float4_e2m1fn, 16),
}
BLOCK_FORMATS = (*ELEMENTS, *(f"{name}:rceil" for name in ELEMENTS if name != "nvfp4"))


@dataclasses.dataclass
class BlockReference:
    underflow: int
    overflow: int
    zero_blocks: int
    clamped_low: int
    clamped_high: int
    scales: dict[int, int]  # scale exponent -> blocks (those with a finite non-zero value)
    exponent: int
    signal: float  # sum of x**2 over the finite values, / 4**exponent
    error: float  # sum of (x - dequantized x)**2, / 4**exponent


def _floor_log2(value: float) -> int:
    return math.frexp(value)[1] - 1


def _rounded_up_to_element(v: float, element) -> float:
    """``v >= 0`` rounded to nearest, ties to even, at the element's precision with no upper
    limit on the exponent (so values past its largest one stay past it)."""
    info = ml_dtypes.finfo(element)
    if v == 0:
        return 0.0
    quantum = math.ldexp(1.0, max(_floor_log2(v), int(info.minexp)) - int(info.nmant))
    return float(np.rint(v / quantum)) * quantum


def _rows(values: np.ndarray) -> np.ndarray:
    array = np.asarray(values)
    wide = array.astype(np.float64)
    if wide.ndim == 0:
        return wide.reshape(1, 1)
    return wide.reshape(-1, wide.shape[-1]) if wide.shape[-1] else wide.reshape(0, 0)


def _blocks(rows: np.ndarray, size: int):
    for row in rows:
        for start in range(0, len(row), size):
            yield row[start : start + size]


def block_reference(values: np.ndarray, name: str) -> BlockReference:
    """The recorded quantities of ``values`` (any float dtype) in block format ``name``."""
    base, _, rule = name.partition(":")
    element, size = ELEMENTS[base]
    rows = _rows(values)
    finite = np.where(np.isfinite(rows), np.abs(rows), 0.0)
    top = float(finite.max()) if finite.size else 0.0
    exponent = _floor_log2(top) if top > 0 else 0
    out = BlockReference(0, 0, 0, 0, 0, collections.Counter(), exponent, 0.0, 0.0)
    squares, errors = [], []
    if base == "nvfp4":
        top32 = np.float32(min(top, float(np.finfo(np.float32).max)))
        tensor_scale = np.float32(top32 / np.float32(448.0 * 6.0))
    for block in _blocks(finite, size):
        if base == "nvfp4":
            dequantized = _nvfp4_block(block, tensor_scale, element, out)
        else:
            dequantized = _mx_block(block, element, rule == "rceil", out)
        squares += [math.ldexp(x, -exponent) ** 2 for x in block]
        errors += [math.ldexp(x - d, -exponent) ** 2 for x, d in zip(block, dequantized)]
    out.signal, out.error = math.fsum(squares), math.fsum(errors)
    out.scales = dict(out.scales)
    return out


def _count(block, scaled, element, largest, out: BlockReference) -> np.ndarray:
    """Counts of one block whose magnitudes ``block`` became ``scaled``; the element values."""
    for v in scaled:
        out.overflow += bool(_rounded_up_to_element(float(v), element) > largest)
    quantized = np.minimum(scaled, largest).astype(element).astype(np.float64)
    out.underflow += int(np.count_nonzero((block != 0) & (quantized == 0)))
    return quantized


def _mx_block(block: np.ndarray, element, rceil: bool, out: BlockReference) -> np.ndarray:
    info = ml_dtypes.finfo(element)
    largest, emax = float(info.max), int(info.maxexp) - 1
    amax = float(block.max())
    if amax == 0:
        out.zero_blocks += 1
        return np.zeros_like(block)
    scale = _floor_log2(amax) - emax
    if rceil and math.ldexp(amax, -scale) > largest:  # the smallest 2**k with amax <= max * 2**k
        scale += 1
    out.clamped_low += scale < -127
    out.clamped_high += scale > 127
    scale = min(max(scale, -127), 127)
    out.scales[scale] += 1
    scaled = np.array([math.ldexp(x, -scale) for x in block])
    quantized = _count(block, scaled, element, largest, out)
    return np.array([math.ldexp(q, scale) for q in quantized])


def _nvfp4_block(block: np.ndarray, tensor_scale, element, out: BlockReference) -> np.ndarray:
    """torchao's ``nvfp4_quantize`` with ``per_tensor_scale``, step by step in float32."""
    f32 = np.float32
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        block32 = np.minimum(block, float(np.finfo(f32).max)).astype(f32)  # saturating
        amax = block32.max()
        if amax == 0:  # zeros in float32 stay zeros (an all-zero tensor's scale is 0 / 0)
            out.zero_blocks += 1
            out.underflow += int(np.count_nonzero(block))  # float64 values below float32's
            return np.zeros_like(block)
        raw = f32(f32(amax / f32(6.0)) / tensor_scale)
        out.clamped_low += bool(raw < f32(2.0**-6))
        out.clamped_high += bool(raw > f32(448.0))
        block_scale = f32(np.clip(raw, f32(2.0**-6), f32(448.0)))
        block_scale = f32(np.array(block_scale).astype(ml_dtypes.float8_e4m3fn))
        out.scales[_floor_log2(float(block_scale))] += 1
        reciprocal = f32(f32(f32(1.0) / tensor_scale) / block_scale)
        scaled = np.where(block32 == 0, f32(0), block32 * reciprocal).astype(np.float64)
    quantized = _count(block, scaled, element, 6.0, out)
    return quantized * float(block_scale) * float(tensor_scale)
