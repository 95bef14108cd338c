"""A format is one value: its kind, its constants and the tables every kernel reads, made
from one definition and checked here against ml_dtypes and the recipes' own numbers."""

from __future__ import annotations

import json
import math
import pickle

import ml_dtypes
import numpy as np
import pytest

from tandv_tb import formats as fmt
from tandv_tb.formats import blocks, kernel_tables


def test_check_formats_makes_values_that_are_their_names():
    made = fmt.check_formats(["nvfp4", "bfloat16", "mxfp8_e4m3:rceil", "float8_e4m3fn"])
    assert made == ("bfloat16", "float8_e4m3fn", "nvfp4", "mxfp8_e4m3:rceil")
    assert [type(f) for f in made] == [fmt.ElementFormat] * 2 + [fmt.BlockFormat] * 2
    assert json.loads(json.dumps(made)) == list(made)
    assert {name: i for i, name in enumerate(made)}["nvfp4"] == 2  # keys found by name
    assert fmt.as_format("nvfp4") is made[2] and pickle.loads(pickle.dumps(made)) == made
    assert pickle.loads(pickle.dumps(made[2])) is made[2]
    with pytest.raises(AttributeError, match="immutable"):
        made[2].block_size = 32


def test_each_kind_says_where_its_counts_lie_and_what_it_offers():
    element, block = fmt.as_format("float8_e5m2"), fmt.as_format("mxfp4_e2m1")
    assert (element.section, block.section) == (fmt.CASTS, fmt.BLOCKS)
    assert element.columns == ("underflow", "overflow") == block.columns[:2]
    assert set(element.metrics) < set(block.metrics)
    assert {"snr_db", "clamped_block_fraction"} == set(block.metrics) - set(element.metrics)
    assert element.estimable and not block.estimable
    assert block.scales_itself and block.saturates
    assert not (element.scales_itself or element.saturates)
    assert fmt.split_formats((block, element)) == ((element,), (block,))


def test_block_formats_carry_their_recipes_constants():
    nvfp4 = fmt.block_format("nvfp4")
    e4m3, e2m1 = (
        ml_dtypes.finfo(getattr(ml_dtypes, n)) for n in ("float8_e4m3fn", "float4_e2m1fn")
    )
    assert (nvfp4.block_size, nvfp4.element, nvfp4.max) == (16, "float4_e2m1fn", float(e2m1.max))
    assert blocks.NVFP4_SCALE_MAX == float(e4m3.max) == 448.0
    assert blocks.NVFP4_ELEMENT_MAX == 6.0
    assert blocks.NVFP4_TENSOR_DIVISOR == 448.0 * 6.0
    assert float(e4m3.smallest_normal) == 2.0**blocks.NVFP4_SCALE_MIN
    assert int(e4m3.nmant) == blocks.NVFP4_SCALE_MANTISSA_BITS
    element = (nvfp4.emin, nvfp4.emax, nvfp4.mantissa_bits, nvfp4.max_mantissa)
    assert element == (
        blocks.NVFP4_EMIN,
        blocks.NVFP4_EMAX,
        blocks.NVFP4_MANTISSA_BITS,
        blocks.NVFP4_MAX_MANTISSA,
    )
    assert nvfp4.scale_exponents == (-6, 8) and nvfp4.rule_name == "nvfp4"
    assert not nvfp4.high_clamps_lose and nvfp4.round_up is None
    mx = fmt.block_format("mxfp8_e4m3")
    assert (mx.block_size, mx.scale_exponents, mx.rule_name) == (32, (-127, 127), "ocp")
    assert mx.round_up == "mxfp8_e4m3:rceil" and fmt.block_format(mx.round_up).rule_name == "rceil"
    assert "give 'mxfp8_e4m3' to formats=" in mx.not_recorded("layer x")


def test_kernel_tables_are_made_from_the_values():
    formats = fmt.check_formats(("float8_e4m3fn", "mxfp8_e5m2", "float16", "nvfp4"))
    info = fmt.info("bfloat16")
    table = kernel_tables.block_table("bfloat16", formats)
    assert table.shape == (2, len(kernel_tables.BLOCK_ROW)) and not table.flags.writeable
    for row, block in zip(table.tolist(), formats[2:]):
        assert tuple(row) == block.kernel_row(info.min_exponent, info.max_exponent)
        rule, size = row[:2]
        assert blocks.RULE_NAMES[rule] == block.rule_name and size == block.block_size
    bits = kernel_tables.threshold_bits("bfloat16", formats, False)
    assert bits.shape == (2, len(kernel_tables.THRESHOLD_ROW)) and not bits.flags.writeable
    for row, element in zip(bits, formats[:2]):
        expected = element.thresholds("bfloat16").as_row()
        as_floats = row[:-1].astype(np.int32).view(np.float32).astype(np.float64)
        assert as_floats.tolist() == [v if math.isfinite(v) else np.inf for v in expected[:-1]]
        assert row[-1] == expected[-1]


def test_a_name_that_is_no_format_is_refused():
    for bad in ("nvfp4:rceil", "mxfp4_e2m1:ceil", "mxfp5_e2m2", "float7"):
        with pytest.raises(ValueError):
            fmt.as_format(bad)
    with pytest.raises(TypeError):
        fmt.check_formats(3)
