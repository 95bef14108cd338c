"""The PyTorch tracker's non-finite watch: NaN/Inf in its tensors on every step.

On a step the tracker does not track, every tensor it would track is checked where it
lies, without a host sync per tensor:

- a CPU tensor by one pass over its bit patterns in the calling thread
  (``tandv_tb.stats.finite``), read at once: on the CPU there is no device to wait for. A
  tensor whose values are dense in memory in another order of its dimensions (a
  transposed gradient: 8 tensors, 4 M values a step of the reference workload) is read
  through the permutation that makes it contiguous, in memory order; only other strided
  tensors and float8 ones are summed (numpy's strided ``sum``), a sum's overflow told
  from NaN/Inf by counting. Only a tensor found non-finite is counted exactly. The work
  stays in the training thread: a torch reduction wakes torch's OpenMP workers, which
  inside a training step cost more than the reduction (a ``sum`` of 12.6 M float32
  values: 186 ms against 3.3 ms for numpy's on the shared 2-core VM under load,
  2026-11-23), as the statistics kernel found. Nor do a worker thread or a parallel
  numba kernel pay: on 2 busy cores both were slower than reading in the training
  thread, and a module output may be edited in place right after its hook
  (``ReLU(inplace=True)``, ``out += identity``), which a later read would miss. Reading
  every value once at memory speed costs untracked steps about 1.05x on the reference
  CPU workload (the target is 1.03x; bench/RESULTS.md, Session 9);
- a tensor on another device by its NaN, +Inf and -Inf counts, computed there and kept
  there until ``step()``, which reads all of them in one transfer per device.

On a tracked step the counts come from the step's statistics, at no extra cost
(``tandv_tb.disk.nonfinite.entries_from_stats``). In a combined distributed run the ranks
agree on every step (one one-value ``all_reduce``); only at a step where some rank found
NaN/Inf are the entries exchanged.
"""

from __future__ import annotations

import math
import weakref

import numpy as np
import torch
import torch.distributed as dist

from tandv_tb.disk.nonfinite import NonfiniteEntry, merge
from tandv_tb.stats.finite import has_nonfinite
from tandv_tb.torch.recorder import DTensor
from tandv_tb.torch.skips import untrackable_reason

_NUMPY_SUMMED = (torch.float32, torch.float64, torch.float16)
#: Formats checked by their bit patterns: the dtype to view a tensor as first (numpy has
#: no bfloat16: its patterns are viewed as int16), or None, and the format's name.
_PATTERNS = {
    torch.float32: (None, "float32"),
    torch.float64: (None, "float64"),
    torch.float16: (None, "float16"),
    torch.bfloat16: (torch.int16, "bfloat16"),
}


def _counts(tensor: torch.Tensor) -> torch.Tensor:
    """NaN, +Inf and -Inf counts of ``tensor``, on its device."""
    return torch.stack((tensor.isnan().sum(), tensor.isposinf().sum(), tensor.isneginf().sum()))


def _on_host(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu"


def _may_be_nonfinite(tensor: torch.Tensor) -> bool:
    """False where a CPU tensor surely holds no NaN/Inf."""
    pattern = _PATTERNS.get(tensor.dtype)
    dense = None if pattern is None else _in_memory_order(tensor)
    if dense is None:
        return not _sum_is_finite(tensor)
    if pattern[0] is not None:
        dense = dense.view(pattern[0])
    return has_nonfinite(dense.numpy(), pattern[1])


def _in_memory_order(tensor: torch.Tensor) -> torch.Tensor | None:
    """A contiguous view of ``tensor``'s values (its dimensions permuted into memory
    order) where they are dense in memory, else None (a broadcast or sliced tensor)."""
    if tensor.is_contiguous():
        return tensor
    order = sorted(range(tensor.dim()), key=tensor.stride, reverse=True)
    permuted = tensor.permute(order)
    return permuted if permuted.is_contiguous() else None


def _sum_is_finite(tensor: torch.Tensor) -> bool:
    """Whether the sum of a CPU tensor is finite (float16 summed in float32: its own sum
    overflows at 65,504)."""
    if tensor.dtype in _NUMPY_SUMMED:
        values = tensor.numpy()
        with np.errstate(over="ignore", invalid="ignore"):  # what the sum is for
            total = values.sum(dtype=np.float32 if values.itemsize == 2 else None)
        return math.isfinite(total)
    return math.isfinite(tensor.sum(dtype=torch.float32).item())


class Watch:
    """The NaN/Inf found in one untracked step, in the order the tensors were seen.

    ``replicated=False`` (ranks other than 0 in a combined distributed run) skips the
    tensors that are the same on every rank, as the tracker's recorder does.
    """

    def __init__(self, replicated: bool = True) -> None:
        self._replicated = replicated
        self._found: list[tuple[str, str, tuple[int, ...] | torch.Tensor]] = []
        # id(tensor) -> (a weak reference to it, its version, its counts or None if clean):
        # a container module's output is often its last child's
        self._checked: dict[int, tuple[weakref.ref, int, tuple[int, ...] | torch.Tensor | None]]
        self._checked = {}

    def check(self, name: str, tensor_type: str, tensor: torch.Tensor, sharded: bool = True):
        """Note ``tensor`` if it holds NaN/Inf (never raises: tracking never stops
        training)."""
        try:
            if DTensor is not None and isinstance(tensor, DTensor):
                if any(placement.is_partial() for placement in tensor.placements):
                    return
                sharded = any(placement.is_shard() for placement in tensor.placements)
                tensor = tensor.to_local()
            if (not sharded and not self._replicated) or untrackable_reason(tensor):
                return
            seen = self._checked.get(id(tensor))
            if seen is not None and seen[0]() is tensor and seen[1] == tensor._version:
                counts = seen[2]
            else:
                counts = self._counts(tensor.detach())
                self._checked[id(tensor)] = (weakref.ref(tensor), tensor._version, counts)
            if counts is not None:
                self._found.append((name, tensor_type, counts))
        except Exception:  # an exotic tensor: the watch passes it over
            return

    @staticmethod
    def _counts(tensor: torch.Tensor) -> tuple[int, ...] | torch.Tensor | None:
        """Counts on the device; on the CPU counts where the sum is not finite, else None."""
        if tensor.dtype.itemsize == 1:  # float8: few kernels take it
            tensor = tensor.float()
        if not _on_host(tensor):
            return _counts(tensor)
        if not _may_be_nonfinite(tensor):
            return None
        return tuple(_counts(tensor).tolist())

    def drain(self) -> list[NonfiniteEntry]:
        """The step's entries (one transfer per device); the watch is empty afterwards."""
        found, self._found, self._checked = self._found, [], {}
        on_device: dict[torch.device, list[int]] = {}
        for i, (_, _, counts) in enumerate(found):
            if isinstance(counts, torch.Tensor):
                on_device.setdefault(counts.device, []).append(i)
        host: dict[int, list[int]] = {}
        for indices in on_device.values():
            rows = torch.stack([found[i][2] for i in indices]).tolist()
            host.update(zip(indices, rows))
        return merge((n, t, host.get(i, c)) for i, (n, t, c) in enumerate(found))


def across_ranks(
    entries: list[NonfiniteEntry], group: object, device: torch.device | None
) -> list[NonfiniteEntry]:
    """Every rank's entries, merged in rank order, on every rank: one small ``all_reduce``
    a step, and an exchange only where some rank found NaN/Inf."""
    flag = torch.tensor([1.0 if entries else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if flag.item() == 0:
        return []
    gathered: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, entries, group=group)
    return merge(
        (e.name, e.tensor_type, (e.nan, e.posinf, e.neginf)) for rank in gathered for e in rank
    )
