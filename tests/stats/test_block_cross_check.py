"""Block-scaled formats cross-checked against two real libraries on crafted and random
float32 tensors: gfloat's ``quantize_block`` with ``compute_scale_amax`` for MX, and
torchao's NVFP4 emulation (``nvfp4_quantize`` with ``per_tensor_scale``) for nvfp4; torchao's
``to_mx`` with ``ScaleCalculationMode.RCEIL`` for the round-up scale rule.

What each library exposes is compared: the values that become 0, the blocks' scale
exponents, the sum of squared errors (from its dequantized values) and, for gfloat, the
values whose scaled magnitude rounds past the element's largest (its ``round_float``
without saturation). The libraries take finite values only, so the tensors hold no
NaN/Inf (the reference test covers those).
"""

from __future__ import annotations

import collections
import math
import warnings

import gfloat
import gfloat.formats
import numpy as np
import pytest
import torch

from tandv_tb.stats import engine
from tests.stats.test_block_formats import crafted_rows

with warnings.catch_warnings():  # torchao warns that its CUDA kernels are absent here
    warnings.simplefilter("ignore")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, unpack_uint4
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import (
        nvfp4_quantize,
        per_tensor_amax_to_scale,
    )

GFLOAT = {
    "mxfp8_e4m3": gfloat.formats.format_info_mxfp8_e4m3,
    "mxfp8_e5m2": gfloat.formats.format_info_mxfp8_e5m2,
    "mxfp6_e3m2": gfloat.formats.format_info_mxfp6_e3m2,
    "mxfp6_e2m3": gfloat.formats.format_info_mxfp6_e2m3,
    "mxfp4_e2m1": gfloat.formats.format_info_mxfp4_e2m1,
}


def tensors(block: int) -> list[np.ndarray]:
    """Crafted rows (whole blocks of them, finite only) and random ones over many binades."""
    crafted = crafted_rows("float32")[:, :32]
    crafted = crafted[np.isfinite(crafted).all(axis=1)]
    out = [crafted if block == 32 else crafted.reshape(-1, 16)]
    for seed in range(4):
        rng = np.random.default_rng(seed)
        shape = (int(rng.integers(1, 6)), block * int(rng.integers(1, 5)))
        scale = 2.0 ** rng.integers(-40, 40, (shape[0], 1)) * 2.0 ** rng.integers(-8, 8, shape)
        values = (rng.standard_normal(shape) * scale).astype(np.float32)
        values[rng.random(shape) < 0.05] = 0
        out.append(values)
    return out


def _counts(stats, name: str) -> tuple:
    block = stats.blocks[name]
    i = stats.formats.index(name)
    scales = {block.scale_lo + k: int(c) for k, c in enumerate(block.scales) if c}
    error = math.ldexp(block.error, 2 * block.exponent)
    return int(stats.underflow[i]), int(stats.overflow[i]), scales, error


def _gfloat_counts(values: np.ndarray, name: str) -> tuple:
    fi = GFLOAT[name]
    largest = fi.etype.max
    under = over = 0
    scales, errors = collections.Counter(), []
    for block in values.reshape(-1, 32).astype(np.float64):
        scale = gfloat.compute_scale_amax(fi.etype.emax, block)
        dequantized = gfloat.quantize_block(fi, block, gfloat.compute_scale_amax)
        if np.abs(block).max() > 0:
            scales[int(np.log2(scale))] += 1
        under += int(np.count_nonzero((block != 0) & (dequantized == 0)))
        for v in block / scale:
            try:
                rounded = gfloat.round_float(fi.etype, float(v), sat=False)
            except ValueError:  # a format without Inf/NaN cannot hold it: it overflows
                over += 1
                continue
            over += not math.isfinite(rounded) or abs(rounded) > largest
        errors += ((block - dequantized) ** 2).tolist()
    return under, over, dict(scales), math.fsum(errors)


@pytest.mark.parametrize("name", sorted(GFLOAT))
def test_mx_formats_agree_with_gfloat(name):
    for values in tensors(32):
        got = _counts(engine.tensor_stats(values, (name,)), name)
        expected = _gfloat_counts(values, name)
        assert got[:3] == expected[:3]
        assert got[3] == pytest.approx(expected[3], rel=1e-12, abs=1e-300)


def _torchao_nvfp4(values: np.ndarray) -> tuple:
    data = torch.from_numpy(values)
    amax = data.abs().max()
    tensor_scale = per_tensor_amax_to_scale(amax)
    block_scales, packed = nvfp4_quantize(data, 16, tensor_scale)
    elements = f4_unpacked_to_f32(unpack_uint4(packed)).reshape(values.shape).double()
    scales = block_scales.float().double().reshape(values.shape[0], -1, 1)
    dequantized = elements.reshape(values.shape[0], -1, 16) * scales * float(tensor_scale)
    x = data.double().reshape(dequantized.shape)
    under = int(((x != 0) & (elements.reshape(x.shape) == 0)).sum())
    nonzero = x.abs().amax(-1) > 0
    exponents = torch.floor(torch.log2(scales.reshape(nonzero.shape)))[nonzero].int().tolist()
    error = math.fsum(((x - dequantized) ** 2).reshape(-1).tolist())
    return under, 0, dict(collections.Counter(exponents)), error


def test_nvfp4_agrees_with_torchao():
    for values in tensors(16):
        got = _counts(engine.tensor_stats(values, ("nvfp4",)), "nvfp4")
        expected = _torchao_nvfp4(values)
        assert got[:3] == expected[:3]
        assert got[3] == pytest.approx(expected[3], rel=1e-12, abs=1e-300)


@pytest.mark.parametrize(
    ("name", "element"),
    [("mxfp8_e4m3", torch.float8_e4m3fn), ("mxfp8_e5m2", torch.float8_e5m2)],
)
def test_round_up_rule_agrees_with_torchao_rceil(name, element):
    """torchao's RCEIL divides amax by the element's largest value in float32, which is
    exact enough here: the tensors' block maxima lie in float32's normal range."""
    for values in tensors(32)[1:]:
        rows = values[np.abs(values).max(axis=1) > 2.0**-100]
        scales, data = to_mx(torch.from_numpy(rows), element, 32, ScaleCalculationMode.RCEIL)
        exponents = scales.view(torch.uint8).int().reshape(-1) - 127
        blocks = torch.from_numpy(np.abs(rows).reshape(-1, 32)).amax(-1) > 0
        expected_scales = dict(collections.Counter(exponents[blocks].tolist()))
        quantized = data.float().reshape(-1, 32)
        under = int(((torch.from_numpy(rows).reshape(-1, 32) != 0) & (quantized == 0)).sum())
        got = _counts(engine.tensor_stats(rows, (f"{name}:rceil",)), f"{name}:rceil")
        assert (got[0], got[2]) == (under, expected_scales)
