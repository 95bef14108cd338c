"""What every Triton launch of the engine shares: where kernels run, the grid's bounds, the
per-device workspace, many-tensor tables on the device, and the one launch helper.

Triton runs kernels on CUDA tensors, or, with ``TRITON_INTERPRET=1`` (read when a kernel
module is imported), on CPU tensors in its interpreter: the same kernels, proven on
machines without a GPU. ``device_type`` says which.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
from collections.abc import Sequence

import numpy as np

#: Tables kept on each device, by content (``device_table``).
_TABLES_KEPT = 64


def interpreting() -> bool:
    """Whether Triton runs its kernels in its interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() not in ("", "0", "false")


def device_type() -> str:
    """The device type whose tensors the kernels read here: ``cuda``, or ``cpu`` in the
    interpreter."""
    return "cpu" if interpreting() else "cuda"


def elsewhere(tensor) -> str | None:
    """Why the kernels cannot run where ``tensor`` lies, or ``None``: Triton launches on
    the current CUDA device (or, interpreting, on the CPU)."""
    if tensor.device.type != device_type():
        return f"Triton does not run on {tensor.device} here"
    if tensor.device.type == "cuda":
        import torch

        current = torch.cuda.current_device()
        if tensor.device.index != current:
            return f"a tensor on {tensor.device}, not on the current device cuda:{current}"
    return None


@dataclasses.dataclass(frozen=True)
class Config:
    """Tiles and grid: blocks per tile of the main kernel (blocks of 32 values) and of
    nvfp4's (16), values per tile of the watch, the fewest tiles per program, the most
    programs per tensor, warps per program."""

    tile: int
    tile16: int
    watch_tile: int
    tiles_per_program: int
    max_programs: int
    num_warps: int


@functools.cache
def config(device) -> Config:
    """The grid's bounds on ``device``: on a GPU, programs of 2,048 values a tile, at
    least 8 tiles each, at most four per multiprocessor per tensor; in the interpreter big
    tiles (each is a round of numpy calls) and at most three programs (still several, so
    that their merge is tested)."""
    if device.type != "cuda":
        return Config(
            tile=256, tile16=512, watch_tile=16384, tiles_per_program=1, max_programs=3,
            num_warps=1,
        )  # fmt: skip
    import torch

    cores = torch.cuda.get_device_properties(device).multi_processor_count
    return Config(
        tile=64, tile16=128, watch_tile=4096, tiles_per_program=8, max_programs=4 * cores,
        num_warps=4,
    )  # fmt: skip


def programs(tiles: int, device) -> int:
    """Programs for a tensor of ``tiles`` tiles (at least one, for its outputs)."""
    bounds = config(device)
    return max(1, min(-(-tiles // bounds.tiles_per_program), bounds.max_programs))


def dense(tensor) -> bool:
    """Whether a torch tensor's values fill ``numel`` consecutive places from its first one
    (contiguous, or a permutation of a contiguous tensor's dimensions)."""
    expected = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride()), key=lambda d: d[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def launch(kernel, grid: tuple[int, ...], *args, **kwargs) -> None:
    """Launch a kernel. In the interpreter numpy's warnings about divisions by zero are
    silenced: on a GPU those give Inf quietly, as the kernels expect."""
    if interpreting():
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            kernel[grid](*args, **kwargs)
    else:
        kernel[grid](*args, **kwargs)


class Workspace:
    """The workspace of one device and stream: int64 counts rows, zero between uses (the
    finalize kernel zeroes what the others add), and float64 rows of per-program sums.
    It grows, never shrinks; its size depends on tensor sizes and formats only. A use
    whose launches did not all happen (an exception between them) leaves it marked, and
    the next use zeroes it first."""

    def __init__(self, device) -> None:
        self.device = device
        self.counts = None
        self.parts = None
        self.in_use = False

    def take(self, count_words: int, part_words: int):
        """(counts, parts) buffers of at least these sizes, for launches ended by
        ``release``."""
        import torch

        if self.counts is None or self.counts.numel() < count_words:
            self.counts = torch.zeros(_grown(count_words), dtype=torch.int64, device=self.device)
        elif self.in_use:
            self.counts.zero_()
        if self.parts is None or self.parts.numel() < part_words:
            self.parts = torch.empty(_grown(part_words), dtype=torch.float64, device=self.device)
        self.in_use = True
        return self.counts, self.parts

    def release(self) -> None:
        """The finalize kernel is launched: the counts rows will be zero again."""
        self.in_use = False


def _grown(words: int) -> int:
    return 1 << max(12, (max(words, 1) - 1).bit_length())


_workspaces: dict = {}


def workspace(device) -> Workspace:
    """The workspace of ``device`` and its current stream (kernels launched on one stream
    run in order, so they may share it)."""
    import torch

    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    if key not in _workspaces:
        _workspaces[key] = Workspace(device)
    return _workspaces[key]


def program_map(counts: Sequence[int]) -> list[int]:
    """(tensor, program) pairs, flat, for tensors of ``counts[t]`` programs each."""
    return [value for t, n in enumerate(counts) for p in range(n) for value in (t, p)]


_tables: collections.OrderedDict = collections.OrderedDict()


def device_table(device, words: Sequence[int]):
    """``words`` as an int64 tensor on ``device``: one host-to-device copy the first time
    these words are seen (the same tensors at the same addresses give the same words, so
    weights and optimizer states hit the cache step after step)."""
    import torch

    array = np.asarray(words, np.int64)
    key = (str(device), array.tobytes())
    table = _tables.get(key)
    if table is None:
        table = torch.from_numpy(array)
        if device.type != "cpu":
            table = table.to(device)
        _tables[key] = table
        if len(_tables) > _TABLES_KEPT:
            _tables.popitem(last=False)
    else:
        _tables.move_to_end(key)
    return table


class Arena:
    """Output space for packed results on one device: slices of large int64 chunks, handed
    out one after another and never reused (a result stays valid while it is referenced),
    so that a tensor's results cost no allocation of their own; a chunk is allocated when
    the last one is full."""

    def __init__(self, device, chunk_words: int = 1 << 16) -> None:
        self.device = device
        self.chunk_words = chunk_words
        self.chunk = None
        self.used = 0

    def take(self, words: int):
        """(buffer, offset) of ``words`` free words."""
        import torch

        if self.chunk is None or self.used + words > self.chunk.numel():
            size = max(self.chunk_words, words)
            self.chunk = torch.empty(size, dtype=torch.int64, device=self.device)
            self.used = 0
        offset = self.used
        self.used += words
        return self.chunk, offset


_arenas: dict = {}


def arena(device) -> Arena:
    """The output arena of ``device`` (``Arena``)."""
    if str(device) not in _arenas:
        _arenas[str(device)] = Arena(device)
    return _arenas[str(device)]
