"""The non-finite watch in Triton: how many NaN, +Inf and -Inf tensors hold, counted on
the device.

One kernel reads each value's integer bit pattern once, in its own width (no widening copy,
no float arithmetic): a value is NaN or Inf exactly when its magnitude pattern reaches its
dtype's first non-finite pattern, Inf when it is Inf's. A program that finds any adds its
counts to its tensor's three int64 counters (``SLOT_COUNTS``: NaN, +Inf, -Inf) with
integer atomics, exact in any order; the caller zeroes the counters once and brings them
to the host once.

- ``watch_into(tensor, counts, slot)``: one launch for one tensor (a hooked gradient or
  activation), into ``counts[3 * slot:3 * slot + 3]``.
- ``watch_many_into(tensors, counts, slots)``: one launch per dtype for many tensors (the
  weights, gradients and optimizer state read at ``step()``), over a table of their
  addresses (a host-to-device copy only where the table is not cached).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import triton
import triton.language as tl

from tandv_tb.stats import _triton_runtime as runtime
from tandv_tb.stats._triton_kernel import bits_pointer, table_entry
from tandv_tb.stats._triton_tables import source_layout
from tandv_tb.stats.inputs import float_dtype_name

#: The dtypes the watch reads.
DTYPES = ("float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
#: Counters per tensor: NaN, +Inf, -Inf (``NonfiniteEntry``'s order).
SLOT_COUNTS = 3
#: Words per tensor in a many-tensor table: address, numel, slot, programs.
TABLE_WIDTH = 4


@triton.jit
def watch_kernel(
    x_ptr, numel, counts_ptr, slot, table_ptr,
    SRC_BITS: tl.constexpr, FINITE_BELOW: tl.constexpr, INF_BITS: tl.constexpr,
    MANY: tl.constexpr, TABLE_WIDTH: tl.constexpr, TILE: tl.constexpr,
):  # fmt: skip
    g = tl.program_id(0)
    if MANY:
        entry, p, _ = table_entry(table_ptr, g, TABLE_WIDTH)
        x = bits_pointer(tl.load(entry), SRC_BITS, True)
        numel = tl.load(entry + 1)
        slot = tl.load(entry + 2)
        programs = tl.load(entry + 3)
    else:
        x = bits_pointer(x_ptr, SRC_BITS, False)
        p = g
        programs = tl.num_programs(0)
    nan = tl.zeros([TILE], tl.int32)
    positive = tl.zeros([TILE], tl.int32)
    negative = tl.zeros([TILE], tl.int32)
    for tile in range(p, tl.cdiv(numel, TILE), programs):
        offsets = tl.cast(tile, tl.int64) * TILE + tl.arange(0, TILE)
        bits = tl.load(x + offsets, mask=offsets < numel, other=0)
        magnitude = bits & ((1 << (SRC_BITS - 1)) - 1)
        infinite = magnitude == INF_BITS
        nan += ((magnitude >= FINITE_BELOW) & (magnitude != INF_BITS)).to(tl.int32)
        positive += (infinite & (bits >= 0)).to(tl.int32)
        negative += (infinite & (bits < 0)).to(tl.int32)
    at = counts_ptr + slot * 3
    found = tl.sum(nan.to(tl.int64))
    tl.atomic_add(at, found, mask=found > 0)
    found = tl.sum(positive.to(tl.int64))
    tl.atomic_add(at + 1, found, mask=found > 0)
    found = tl.sum(negative.to(tl.int64))
    tl.atomic_add(at + 2, found, mask=found > 0)


def unsupported_reason(tensor) -> str | None:
    """Why the watch kernel cannot read ``tensor``, or ``None`` (any order of dense values
    will do: only whether one is NaN/Inf counts)."""
    dtype = float_dtype_name(tensor.dtype)
    if dtype not in DTYPES:
        return f"the Triton watch does not read {dtype} tensors"
    elsewhere = runtime.elsewhere(tensor)
    if elsewhere:
        return elsewhere
    if not runtime.dense(tensor):
        return "the values are not dense in memory (a strided view)"
    return None


def _constants(dtype: str, device, many: bool) -> dict:
    bits, _, _, finite_below, inf_bits = source_layout(dtype)
    bounds = runtime.config(device)
    return dict(
        SRC_BITS=bits,
        FINITE_BELOW=finite_below,
        INF_BITS=inf_bits,
        MANY=many,
        TABLE_WIDTH=TABLE_WIDTH,
        TILE=bounds.watch_tile,
        num_warps=bounds.num_warps,
    )


def _programs(numel: int, device) -> int:
    return runtime.programs(-(-numel // runtime.config(device).watch_tile), device)


def watch_into(tensor, counts, slot: int) -> None:
    """Add the NaN, +Inf and -Inf counts of ``tensor`` (``unsupported_reason`` is None for
    it) to ``counts[3 * slot:3 * slot + 3]``, an int64 tensor on its device. One launch."""
    device = tensor.device
    runtime.launch(
        watch_kernel, (_programs(tensor.numel(), device),), tensor, tensor.numel(), counts,
        slot, counts, **_constants(float_dtype_name(tensor.dtype), device, False),
    )  # fmt: skip


def watch_many_into(tensors: Sequence, counts, slots: Sequence[int]) -> None:
    """``watch_into`` of many tensors on ``counts``' device, tensor ``i`` into slot
    ``slots[i]``: one launch per dtype among them."""
    device = counts.device
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for i, tensor in enumerate(tensors):
        groups[float_dtype_name(tensor.dtype)].append(i)
    for dtype, members in groups.items():
        words, programs = [len(members)], []
        for i in members:
            n = _programs(tensors[i].numel(), device)
            words += [tensors[i].data_ptr(), tensors[i].numel(), slots[i], n]
            programs.append(n)
        table = runtime.device_table(device, words + runtime.program_map(programs))
        runtime.launch(
            watch_kernel, (sum(programs),), counts, 1, counts, 0, table,
            **_constants(dtype, device, True),
        )  # fmt: skip
