"""Launching the Triton statistics kernels (``_triton_kernel``) for one tensor or for many.

Per tensor the kernels write one int64 vector of ``packed_length(dtype, formats)`` words
into a caller's buffer: the engine's counts vector, then its moments vector as float64 bit
patterns (``unpack`` reads it). A caller may give every tensor a slice of one buffer and
bring it to the host in one transfer.

- ``compute_into(tensor, formats, out, offset)``: two launches (``stats_main``, ``stats_finalize``),
  three with nvfp4 (``stats_nvfp4`` between them), and no torch operation.
- ``compute_many_into(tensors, formats, out, offsets)``: the same kernels over a table of
  the tensors (address, sizes, rows; ``_triton_kernel._tensor``), per dtype: two or three
  launches, and one host-to-device copy of the table where it is not cached
  (``_triton_runtime.device_table``).

Counts are added with integer atomics into the workspace rows (``_triton_runtime``) that
the finalize kernel leaves zeroed; moments go to per-program rows merged in a fixed order.
Nothing depends on the values: no host sync, no allocation but the workspace's growth.
``unsupported_reason`` says which tensors the kernels cannot take.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from tandv_tb.stats import _triton_kernel as kernels
from tandv_tb.stats import _triton_runtime as runtime
from tandv_tb.stats._triton_tables import DTYPES, THRESHOLDS, KernelTables, kernel_tables
from tandv_tb.stats.inputs import float_dtype_name
from tandv_tb.stats.tensor_stats import TensorStats

#: Words per tensor in a many-tensor table (``_triton_kernel._tensor``).
TABLE_WIDTH = 6
#: Values per tile row without MX formats (a tiling choice: rows are then irrelevant).
_LANES = 32
#: The output arena of a device (``_triton_runtime.Arena``), for callers without buffers.
arena = runtime.arena
#: The kernels, for those who count launches (``triton``'s ``add_pre_run_hook``).
KERNELS = (kernels.stats_main, kernels.stats_nvfp4, kernels.stats_finalize)


def packed_length(dtype: str, formats: tuple[str, ...]) -> int:
    """Words of a tensor's packed output (counts, then moments' float64 patterns)."""
    return kernel_tables(dtype, formats).packed_length


def unpack(dtype: str, formats: tuple[str, ...], packed: np.ndarray) -> TensorStats:
    """``TensorStats`` of one tensor's packed output brought to the host (int64; what
    follows its ``packed_length`` words is ignored)."""
    tables = kernel_tables(dtype, formats)
    packed = np.asarray(packed, np.int64)[: tables.packed_length]
    counts, moments = packed[: tables.n_counts], packed[tables.n_counts :].view(np.float64)
    return TensorStats.unpack(dtype, formats, counts, moments)


def unsupported_reason(tensor, formats: tuple[str, ...]) -> str | None:
    """Why the kernels cannot read ``tensor`` (a torch tensor), or ``None``: a dtype they do
    not read, values not dense in memory (or, with block formats, rows not each in one
    piece), a device they do not run on here (``_triton_runtime.elsewhere``).

    With block formats the rows may lie in any order (a block's counts do not depend on
    where it lies): a permuted tensor whose last dimension is its densest (the gradient
    of a batch-first attention output, say) is read as it lies."""
    dtype = float_dtype_name(tensor.dtype)
    if dtype not in DTYPES:
        return f"the Triton kernels do not read {dtype} tensors"
    elsewhere = runtime.elsewhere(tensor)
    if elsewhere:
        return elsewhere
    if tensor.is_contiguous():
        return None
    if not runtime.dense(tensor):
        return "the values are not dense in memory (a strided view)"
    rows_whole = tensor.shape[-1] == 1 or tensor.stride(-1) == 1
    has_blocks = kernel_tables(float_dtype_name(tensor.dtype), formats).has_blocks
    if has_blocks and not rows_whole:
        return "block formats need each row's values side by side (last dimension densest)"
    return None


def _row_length(tensor, tables: KernelTables) -> int:
    """The rows the kernels take blocks along: the last dimension with block formats (a
    0-d tensor is one row of one value), else the whole tensor as one row."""
    if tables.mx_block or tables.nvfp4_block:
        return max(int(tensor.shape[-1]) if tensor.dim() else 1, 1)
    return max(tensor.numel(), 1)


def _sizes(tensor, tables: KernelTables) -> tuple[int, int, int]:
    """(numel, row length, programs) of a tensor."""
    numel, row_length = tensor.numel(), _row_length(tensor, tables)
    block = tables.mx_block or _LANES
    blocks = numel // row_length * -(-row_length // block)
    tiles = -(-blocks // runtime.config(tensor.device).tile)
    return numel, row_length, runtime.programs(tiles, tensor.device)


def _main_constants(tables: KernelTables, device, many: bool) -> dict:
    bounds = runtime.config(device)
    n_mx = len(tables.mx_scale_slots)
    return dict(
        **_dtype_constants(tables),
        HIST_LO=tables.hist_lo,
        N_KEYS=tables.n_keys,
        KEYS_P2=tables.keys_p2,
        ELEMENTS=tables.elements,
        N_ELEMENTS=len(tables.elements) // THRESHOLDS,
        MX=tables.mx,
        N_MX=n_mx,
        MX_P2=max(2, _power_of_two(n_mx)),
        MX_SCALE_SLOTS=tables.mx_scale_slots,
        SCALES_P2=tables.scales_p2,
        SMALL_SLOTS=tables.small_slots,
        N_SMALL=len(tables.small_slots),
        SMALL_P2=tables.small_p2,
        MX_SCALE_MIN=tables.mx_scale_min,
        MX_SCALE_MAX=tables.mx_scale_max,
        BLOCK=tables.mx_block or _LANES,
        TILE=bounds.tile,
        **_common(tables, device, many),
    )


def _nvfp4_constants(tables: KernelTables, device, many: bool) -> dict:
    return dict(
        **_dtype_constants(tables),
        NVFP4=tables.nvfp4,
        NVFP4_SLOTS=tables.nvfp4_slots,
        ELEMENT_MAX=tables.nvfp4_element_max,
        DIVISOR=tables.nvfp4_divisor,
        LOWEST=tables.nvfp4_lowest,
        HIGHEST=tables.nvfp4_highest,
        SCALE_DROP=tables.nvfp4_scale_drop,
        SCALES_P2=_power_of_two(tables.nvfp4[5]),
        BLOCK=tables.nvfp4_block,
        TILE=runtime.config(device).tile16,
        **_common(tables, device, many),
    )


def _finalize_constants(tables: KernelTables, device, many: bool, most_programs: int) -> dict:
    return dict(
        COUNTS_P2=_power_of_two(tables.workspace_width),
        PROGRAMS_P2=max(2, _power_of_two(most_programs)),
        ZERO_OVERFLOW=tables.zero_overflow_slots,
        N_ZERO_OVERFLOW=len(tables.zero_overflow_slots),
        BLOCK_SLOTS=tables.block_moment_slots,
        BLOCK_IN_PROGRAM_UNIT=tables.block_in_program_unit,
        N_BLOCKS=len(tables.block_moment_slots),
        **_common(tables, device, many),
    )


def _dtype_constants(tables: KernelTables) -> dict:
    return dict(
        SRC_BITS=tables.src_bits,
        SRC_MANT=tables.src_mant,
        SRC_BIAS=tables.src_bias,
        FINITE_BELOW=tables.finite_below,
        INF_BITS=tables.inf_bits,
    )


def _common(tables: KernelTables, device, many: bool) -> dict:
    return dict(
        N_COUNTS=tables.n_counts,
        WS_WIDTH=tables.workspace_width,
        PART_WIDTH=tables.part_width,
        MANY=many,
        TABLE_WIDTH=TABLE_WIDTH,
        num_warps=runtime.config(device).num_warps,
    )


def _power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def compute_into(tensor, formats: tuple[str, ...], out, offset: int = 0) -> None:
    """Statistics of one torch tensor (``unsupported_reason`` is None for it, ``formats``
    canonical) written to ``out[offset:]``, ``packed_length`` words of an int64 tensor on
    its device."""
    tables = kernel_tables(float_dtype_name(tensor.dtype), formats)
    device = tensor.device
    numel, row_length, programs = _sizes(tensor, tables)
    workspace = runtime.workspace(device)
    counts, parts = workspace.take(tables.workspace_width, programs * tables.part_width)
    grid = (programs,)
    args = (tensor, numel, row_length, counts, counts, parts)
    runtime.launch(kernels.stats_main, grid, *args, **_main_constants(tables, device, False))
    if tables.nvfp4:
        runtime.launch(kernels.stats_nvfp4, grid, *args, **_nvfp4_constants(tables, device, False))
    runtime.launch(
        kernels.stats_finalize, (1,), out, offset, numel, programs, counts, counts, parts,
        **_finalize_constants(tables, device, False, programs),
    )  # fmt: skip
    workspace.release()


def packed_offsets(tensors: Sequence, formats: tuple[str, ...]) -> list[int]:
    """Offsets of the tensors' packed outputs laid one after another, with the total
    length last (one more entry than tensors)."""
    lengths = [packed_length(float_dtype_name(t.dtype), formats) for t in tensors]
    return [0, *np.cumsum(lengths, dtype=np.int64).tolist()]


def compute_many_into(
    tensors: Sequence, formats: tuple[str, ...], out, offsets: Sequence[int]
) -> None:
    """``compute_into`` of many tensors (each taken by the kernels, all on ``out``'s
    device), tensor ``i`` written to ``out[offsets[i]:]``: per dtype two or three launches
    (and a table copy where it is not cached). Each tensor gets the programs and the
    record ``compute_into`` gives it, bit for bit."""
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for i, tensor in enumerate(tensors):
        groups[float_dtype_name(tensor.dtype)].append(i)
    for dtype, members in groups.items():
        _compute_group(
            [tensors[i] for i in members],
            kernel_tables(dtype, formats),
            out,
            [offsets[i] for i in members],
        )


def _compute_group(tensors: Sequence, tables: KernelTables, out, offsets: Sequence[int]) -> None:
    """One dtype's launches. The table holds the outputs' offsets from the first, so that
    the same tensors written to another place of a buffer reuse it."""
    device = out.device
    base = min(offsets)
    words, counts = [len(tensors)], []
    for tensor, offset in zip(tensors, offsets):
        numel, row_length, programs = _sizes(tensor, tables)
        words += [tensor.data_ptr(), numel, row_length, sum(counts), programs, offset - base]
        counts.append(programs)
    table = runtime.device_table(device, words + runtime.program_map(counts))
    total = sum(counts)
    workspace = runtime.workspace(device)
    ws_counts, parts = workspace.take(
        len(tensors) * tables.workspace_width, total * tables.part_width
    )
    args = (ws_counts, 1, 1, table, ws_counts, parts)
    runtime.launch(kernels.stats_main, (total,), *args, **_main_constants(tables, device, True))
    if tables.nvfp4:
        runtime.launch(
            kernels.stats_nvfp4, (total,), *args, **_nvfp4_constants(tables, device, True)
        )
    runtime.launch(
        kernels.stats_finalize, (len(tensors),), out, base, 1, 1, table, ws_counts, parts,
        **_finalize_constants(tables, device, True, max(counts)),
    )  # fmt: skip
    workspace.release()
