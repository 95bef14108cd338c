"""The PyTorch tracker's non-finite watch: NaN/Inf in its tensors on every step.

On a step the tracker does not track, every tensor it would track is checked where it
lies, without a host sync per tensor:

- a CPU tensor is read at once (on the CPU there is no device to wait for), at the hook
  that hands it over: a module output may be edited in place right after its hook
  (``ReLU(inplace=True)``, ``out += identity``), which a later read would miss.
  - One of 32 or 64-bit floats with at least ``_SUMMED_FROM`` values is summed by torch,
    on the intra-op threads training uses: reading on both cores makes the untracked step
    about 1.5% of a step cheaper than reading in the training thread alone
    (bench/RESULTS.md). A sum reaches NaN or Inf whenever a value is one; a
    finite sum that overflows is told from them by counting.
  - A smaller one, or one of 16-bit floats, dense in memory in some order of its
    dimensions (a transposed gradient too), is read by one pass over its bit patterns
    (``tandv_tb.stats.finite``); the weights, gradients and optimizer state read at
    ``step()`` (200-odd tensors on the reference workload) in one call.
  - Any other (sliced or broadcast, float8) is summed.
  Only a tensor found non-finite is counted exactly. Neither a worker thread nor a
  parallel numba kernel pays: both compete with torch's own threads for the cores
  (bench/RESULTS.md).
- a tensor on another device by its NaN, +Inf and -Inf counts, computed there and kept
  there until ``step()``, which reads all of them in one transfer per device:
  - where the switch sends it to Triton (``TANDV_TB_KERNEL``: a CUDA tensor where
    ``triton`` imports; with ``triton`` every tensor, also a CPU one in Triton's
    interpreter, which is then watched exactly as on a GPU), by the Triton watch kernel
    into a slot of one counter buffer per device (``device_watch``): one launch per
    hooked tensor, one per dtype for everything read at ``step()``;
  - else by torch operations. The weights and optimizer state read at ``step()``,
    unchanged until the watch's counts are read, are checked there by one sum each (one
    operation, not ten: on a GPU a step's hundreds of small operations cost more than
    their arithmetic) and counted only where the sum is not finite.

On a tracked step the counts come from the step's statistics, at no extra cost
(``tandv_tb.event_files.nonfinite_record.entries_from_stats``). In a combined distributed
run the ranks agree on every step (one one-value ``all_reduce``); only at a step where some
rank found NaN/Inf are the entries exchanged.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable

import numpy as np
import torch
import torch.distributed as dist

from tandv_tb.event_files.nonfinite_record import NonfiniteEntry, merge
from tandv_tb.stats import kernel_failed, kernel_setting, watch_kernel
from tandv_tb.stats.finite import nonfinite_at, nonfinite_in
from tandv_tb.torch.device_watch import SLOT_WIDTH, Counters, Slot
from tandv_tb.torch.distributed import collectively
from tandv_tb.torch.memo import TensorMemo
from tandv_tb.torch.parallel_layout import ParallelLayout, Spread, local
from tandv_tb.torch.skips import untrackable_reason

#: From this many values a CPU tensor of 32 or 64-bit floats is summed by torch, over its
#: intra-op threads (the cores training uses, awake between its operations), instead of
#: read by the bit-pattern kernel in the training thread (bench/RESULTS.md).
_SUMMED_FROM = 1 << 18
#: Formats checked by their bit patterns, by dtype.
_PATTERN_FORMATS = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}


class _Summed:
    """A tensor on a device checked by its sum, kept there until the step's counts are
    read; counted then, where the sum is not finite (the tensor must stay unchanged)."""

    __slots__ = ("tensor", "total")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.total = _wide_sum(tensor)


#: What the watch found in one tensor: its NaN, +Inf and -Inf counts (on its device, in a
#: slot of the Triton watch's counters, or read), its sum still to read (``_Summed``), or
#: None where it holds no NaN/Inf.
Counts = tuple[int, ...] | torch.Tensor | Slot | _Summed | None


def _counts(tensor: torch.Tensor) -> torch.Tensor:
    """NaN, +Inf and -Inf counts of ``tensor``, on its device (float8 as float32: few
    kernels take it)."""
    if tensor.dtype.itemsize == 1:
        tensor = tensor.float()
    return torch.stack((tensor.isnan().sum(), tensor.isposinf().sum(), tensor.isneginf().sum()))


def _read_counts(tensor: torch.Tensor) -> tuple[int, ...]:
    """The counts of a CPU tensor found (or likely) to hold NaN/Inf, read."""
    return tuple(_counts(tensor.detach()).tolist())


def _dense(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s values fill one block of memory from its ``data_ptr()``, in the
    order of its dimensions or another (a transposed gradient), not broadcast or sliced."""
    if tensor.is_contiguous():
        return True
    order = sorted(range(tensor.dim()), key=tensor.stride, reverse=True)
    return tensor.permute(order).is_contiguous()


def _block_format(tensor: torch.Tensor) -> str | None:
    """The format to read a CPU tensor's bit patterns in, where it is dense in memory and
    torch does not sum it faster; else None."""
    format_name = _PATTERN_FORMATS.get(tensor.dtype)
    if (
        format_name is not None
        and (tensor.dtype.itemsize == 2 or tensor.numel() < _SUMMED_FROM)
        and _dense(tensor)
    ):
        return format_name
    return None


def _wide_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The sum of a tensor, NaN or Inf whenever a value is one (a finite sum that
    overflows is told from them by counting); 16-bit floats are summed in float32
    (float16's own sum overflows at 65,504), float8 as float32 (few kernels take it)."""
    if tensor.dtype.itemsize == 1:
        return tensor.float().sum()
    return tensor.sum(dtype=torch.float32 if tensor.dtype.itemsize < 4 else None)


def _host_counts(tensor: torch.Tensor) -> Counts:
    """A CPU tensor (large, not dense in memory, or float8) counted where its sum is not
    finite, else None."""
    if math.isfinite(_wide_sum(tensor).item()):
        return None
    return _read_counts(tensor)


class _Blocks:
    """CPU tensors dense in memory, read by their bit patterns in one call per format."""

    def __init__(self) -> None:
        # format -> its tensors, by slot (which keeps them alive until ``read``)
        self._by_format: dict[str, dict[int, torch.Tensor]] = {}

    def add(self, slot: int, tensor: torch.Tensor, format_name: str) -> None:
        self._by_format.setdefault(format_name, {})[slot] = tensor

    def read(self) -> list[tuple[int, torch.Tensor]]:
        """The slots, and tensors, that hold NaN or Inf."""
        flagged = []
        for format_name, tensors in self._by_format.items():
            addresses = np.array([t.data_ptr() for t in tensors.values()], dtype=np.int64)
            counts = np.array([t.numel() for t in tensors.values()], dtype=np.int64)
            flags = nonfinite_at(addresses, counts, format_name).tolist()
            flagged.extend(item for item, flag in zip(tensors.items(), flags) if flag)
        return flagged


class Watch:
    """The NaN/Inf found in one untracked step, in the order the tensors were seen.

    ``layout`` tells which tensors this rank checks: not the replicas another rank
    counts, as the tracker's recorder does (``parallel_layout``).
    """

    def __init__(self, layout: ParallelLayout) -> None:
        self._layout = layout
        self._found: list[tuple[str, str, Counts]] = []
        self._checked: TensorMemo[Counts] = TensorMemo()  # a tensor's counts, or None
        self._counters = Counters()  # the Triton watch's, on each device
        self._setting = ""  # TANDV_TB_KERNEL, read once a step (``_kernel``)

    def check(
        self,
        name: str,
        tensor_type: str,
        tensor: torch.Tensor,
        spread: Spread | None = None,
        reuse: bool = True,
    ):
        """Note ``tensor`` (a module's output or input, or a gradient w.r.t. one) if it holds
        NaN/Inf, read now; a tensor seen before in this step, unchanged, is not read again,
        unless ``reuse=False`` (a tensor a compiled graph hands over: ``Tracker._receive``
        says why). ``spread`` as ``Recorder.record`` takes it. Never raises: tracking never
        stops training."""
        try:
            if spread is None:
                spread = self._layout.of_data(name, tensor)
            read = functools.partial(self._read_one, spread=spread)
            counts = self._checked.get(tensor, read, reuse)
        except Exception:  # an exotic tensor: the watch passes it over
            return
        if counts is not None:
            self._found.append((name, tensor_type, counts))

    def check_all(
        self,
        tensors: Iterable[tuple[str, str, torch.Tensor, Spread]],
        unchanged: bool = False,
    ) -> None:
        """Note each of ``tensors`` (name, tensor type, tensor, spread: the weights, weight
        gradients and optimizer state at ``step()``) that holds NaN/Inf, in their order,
        the CPU ones read in one call (never raises). ``unchanged``: the tensors stay as
        they are until ``drain`` (those on a device are then checked by their sums)."""
        named = list(tensors)
        found = self._read([(tensor, spread) for _, _, tensor, spread in named], unchanged)
        for (name, tensor_type, _, _), counts in zip(named, found):
            if counts is not None:
                self._found.append((name, tensor_type, counts))

    def _read_one(self, tensor: torch.Tensor, *, spread: Spread) -> Counts:
        local = self._local(tensor, spread)
        if local is None:
            return None
        kernel = self._kernel(local)
        if kernel == "triton":
            return self._triton([local])[0]
        if kernel == "array":
            return _counts(local.detach())
        format_name = _block_format(local)
        if format_name is None:
            return _host_counts(local.detach())
        if nonfinite_in(local.data_ptr(), local.numel(), format_name):
            return _read_counts(local)
        return None

    def _kernel(self, tensor: torch.Tensor) -> str:
        """``watch_kernel`` of ``tensor``, the switch read at the step's first tensor."""
        if not self._setting:
            self._setting = kernel_setting()
        return watch_kernel(tensor, self._setting)

    def _triton(self, tensors: list[torch.Tensor]) -> list[Counts]:
        """Slots of the Triton watch's counters for ``tensors`` (or, where a launch fails,
        their counts by torch operations from now on: ``kernel_failed``)."""
        try:
            if len(tensors) == 1:
                return [self._counters.add(tensors[0])]
            return list(self._counters.add_many(tensors))
        except Exception as error:  # Triton cannot compile for this GPU, say
            kernel_failed(error)
            return [_counts(tensor.detach()) for tensor in tensors]

    def _read(self, tensors: list[tuple[torch.Tensor, Spread]], unchanged: bool) -> list[Counts]:
        """What each of ``tensors`` holds (None also for a tensor passed over), the blocks
        of each format read in one call."""
        found: list[Counts] = [None] * len(tensors)
        blocks = _Blocks()
        triton: dict[int, torch.Tensor] = {}
        for slot, (tensor, spread) in enumerate(tensors):
            try:
                local = self._local(tensor, spread)
                if local is None:
                    continue
                kernel = self._kernel(local)
                format_name = _block_format(local) if kernel == "cpu" else None
                if kernel == "triton":
                    triton[slot] = local
                elif format_name is not None:
                    blocks.add(slot, local, format_name)
                elif kernel == "array":
                    found[slot] = _Summed(local.detach()) if unchanged else _counts(local.detach())
                else:
                    found[slot] = _host_counts(local.detach())
            except Exception:  # an exotic tensor: the watch passes it over
                continue
        try:
            for slot, tensor in blocks.read():
                found[slot] = _read_counts(tensor)
        except Exception:  # never expected: the watch passes the step's blocks over
            pass
        if triton:
            found_by_triton = self._triton(list(triton.values()))
            for slot, counts in zip(triton, found_by_triton):
                found[slot] = counts
        return found

    def _local(self, tensor: torch.Tensor, spread: Spread) -> torch.Tensor | None:
        """The values of ``tensor`` this rank checks (a DTensor's local shard), or None
        where it checks none."""
        if spread in (Spread.ELSEWHERE, Spread.PARTIAL):
            return None
        tensor = local(tensor)
        return None if untrackable_reason(tensor) else tensor

    def drain(self) -> list[NonfiniteEntry]:
        """The step's entries (one transfer per device, and one more per tensor whose
        sum is not finite); the watch is empty afterwards."""
        found, self._found = self._found, []
        self._checked.clear()
        self._setting = ""
        counters = self._counters.used()
        on_device: dict[torch.device, list[int]] = {device: [] for device in counters}
        for i, (_, _, counts) in enumerate(found):
            if isinstance(counts, _Summed | torch.Tensor):
                on_device.setdefault(_on_device(counts).device, []).append(i)
        host: dict[int, tuple[int, ...]] = {}
        slots: dict[torch.device, list[int]] = {}  # the counters read, by device
        for device, indices in on_device.items():
            parts = [_on_device(found[i][2]).reshape(-1).double() for i in indices]
            if device in counters:
                parts.insert(0, counters[device].double())
            values = iter((parts[0] if len(parts) == 1 else torch.cat(parts)).tolist())
            if device in counters:
                slots[device] = [int(v) for v in itertools.islice(values, parts.pop(0).numel())]
            for i, part in zip(indices, parts):
                read = list(itertools.islice(values, part.numel()))
                counts = found[i][2]
                if not isinstance(counts, _Summed):
                    host[i] = tuple(int(v) for v in read)
                elif not math.isfinite(read[0]):
                    host[i] = _read_counts(counts.tensor)
                else:
                    host[i] = (0, 0, 0)
        self._counters.clear()
        for i, (_, _, counts) in enumerate(found):
            if isinstance(counts, Slot):
                start = SLOT_WIDTH * counts.index
                host[i] = tuple(slots[counts.device][start : start + SLOT_WIDTH])
        return merge((n, t, host.get(i, c)) for i, (n, t, c) in enumerate(found))


def _on_device(counts: torch.Tensor | _Summed) -> torch.Tensor:
    """What a tensor's entry keeps on its device: its counts, or its sum."""
    return counts.total if isinstance(counts, _Summed) else counts


def across_ranks(
    entries: list[NonfiniteEntry], group: object, device: torch.device | None
) -> list[NonfiniteEntry]:
    """Every rank's entries, merged in rank order, on every rank: one small ``all_reduce``
    a step, and an exchange only where some rank found NaN/Inf."""
    flag = torch.tensor([1.0 if entries else 0.0], device=device)
    collectively(dist.all_reduce, flag, op=dist.ReduceOp.MAX, group=group)
    if flag.item() == 0:
        return []
    gathered: list = [None] * dist.get_world_size(group)
    collectively(dist.all_gather_object, gathered, entries, group=group)
    return merge(
        (e.name, e.tensor_type, (e.nan, e.posinf, e.neginf)) for rank in gathered for e in rank
    )
