"""Statistics of data-parallel and sharded tensors combined across ranks, exactly.

One ``all_reduce`` (a sum) per tracked step carries everything, in a layout all ranks
agree on (``Layout``). For each tracked tensor the packed vector holds its counts,
exponent histogram and cast counts, which simply add, and one slot per rank: each rank
writes its finite count and scaled moments (``stats.record.MOMENTS``) into its own slot
and zeros into the others', so the sum hands every rank's moments to rank 0 unchanged.
Rank 0 then merges them in rank order with ``TensorStats.merge``: a common scale (the
largest), sums rescaled to it, M2 merged by Chan's formula, max/min reduced. That is the
arithmetic of merging the ranks' tensors on one machine: no precision is lost to a scale
agreed in advance, and no second collective is needed. Counts travel as float64, exact
below 2**53.

The layout lists every tensor any rank has tracked, with a histogram range wide enough for
all of them; a rank lacking one this step sends zeros. When a rank tracks a tensor the
layout lacks (the first tracked step; a module that runs on some ranks only), every rank
sees it in the sum's first value, the ranks exchange their lists once
(``all_gather_object``), extend the layout identically, and send the step again. Sizes
therefore always match: a collective of mismatched sizes would abort the process.

Block-scaled formats (``tandv_tb.formats.blocks``) also need each tensor's block scales and
quantization error, whose ranges differ from rank to rank: where they are recorded, the
ranks' ``BlockCounts`` travel in one more collective (``all_gather_object``) and rank 0
merges them in rank order (``BlockCounts.merge``, exact: counts add, the error sums are
rescaled to the larger exponent).

Which ranks' values count is decided where they are recorded (``parallel_layout``): a
replica that another rank counts is not recorded, so the sums count each logical tensor
once. A tensor whose layout cannot be told travels under a key of its own rank and reaches
rank 0 as that rank's (``per_rank``). A tensor held whole by rank 0 alone (``WHOLE``) does
not travel; one held whole by another rank (a later pipeline stage's weights) does.

A collective that fails (a rank died: gloo says so at once) raises ``RanksLost``; the
tracker then stops combining, so that training goes on as it would without it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist

from tandv_tb import formats as fmt
from tandv_tb.event_files.record import COUNTS
from tandv_tb.stats import TensorStats
from tandv_tb.stats.tensor_stats import MOMENTS
from tandv_tb.torch.parallel_layout import Spread
from tandv_tb.tracking.processes import Apart
from tandv_tb.tracking.step_buffer import Entry, Result

_SLOT = 1 + len(MOMENTS)  # finite count, then the moments

#: Orders of a pipeline stage's tensors start at its index times this, so that stages sort
#: as in the whole model.
STAGE_ORDERS = 1 << 20

#: A layout key: name, tensor type, and the rank whose own values it holds (None: merged).
Key = tuple[str, str, "int | None"]


class RanksLost(RuntimeError):
    """A collective of the tracker failed: some rank is gone."""


def collectively(call, *args, **kwargs):
    """``call(*args, **kwargs)``, a collective; ``RanksLost`` where it fails."""
    try:
        return call(*args, **kwargs)
    except RuntimeError as error:  # gloo, NCCL: a peer closed its connection, a timeout
        raise RanksLost(
            "combining the ranks' statistics failed, a rank is gone "
            f"({type(error).__name__}: {error}); this tracker stops, what it wrote is kept"
        ) from error


def is_distributed() -> bool:
    """Whether a default process group of more than one rank exists."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


@dataclasses.dataclass
class Place:
    """Where one tracked tensor lies in the packed vector, and how it is written."""

    entry: Entry
    dtype: str
    hist_lo: int
    n_bins: int

    def fits(self, stats: TensorStats) -> bool:
        lo = stats.hist_lo - self.hist_lo
        return lo >= 0 and lo + len(stats.hist) <= self.n_bins

    def widen(self, dtype: str, hist_lo: int, n_bins: int) -> None:
        hi = max(self.hist_lo + self.n_bins, hist_lo + n_bins)
        self.hist_lo = min(self.hist_lo, hist_lo)
        self.n_bins = hi - self.hist_lo
        self.dtype = max(self.dtype, dtype, key=lambda d: (fmt.info(d).n_bins, d))


class RankCombiner:
    """Combines every rank's statistics of the same tracked tensors on rank 0.

    ``position``: the pipeline stage this rank runs (its tensors' orders come after the
    earlier stages'), 0 without pipeline parallelism.
    """

    def __init__(
        self,
        formats: tuple[str, ...],
        group: dist.ProcessGroup | None = None,
        position: int = 0,
    ) -> None:
        self.formats = formats
        self._block_formats = fmt.split_formats(formats)[1]
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self._offset = position * STAGE_ORDERS
        nccl = "nccl" in str(dist.get_backend(group))
        self.device = torch.device("cuda", torch.cuda.current_device()) if nccl else None
        self._layout: dict[Key, Place] = {}
        #: Whether some rank's tensors held NaN/Inf at the last ``combine`` (on every rank).
        self.nonfinite = False

    def combine(
        self,
        results: Sequence[Result],
        spreads: Mapping[tuple[str, str], Spread],
        tensor_parallel: bool = False,
    ) -> tuple[list[Result], Apart]:
        """Each tracked tensor's statistics over all ranks (on rank 0; nothing elsewhere):
        the merged records, and each rank's own records of the tensors whose layout
        cannot be told, as (rank, entry, statistics).

        ``spreads``: how this rank's values of each tensor stand to the other ranks'.
        ``tensor_parallel``: whether the model computes with DTensors, where an ``UNTOLD``
        tensor is recorded per rank (``ParallelLayout.tensor_parallel``). Every rank calls
        this at the same steps (``tracker.step()`` on every rank).
        """
        apart = {Spread.UNTOLD} if tensor_parallel else set()
        told = [(e, s, spreads.get((e.name, e.tensor_type), Spread.PIECE)) for e, s in results]
        kept = [(self._placed(e), s) for e, s, spread in told if self._kept(spread)]
        local = {
            self._key(e, spread in apart): (e, s) for e, s, spread in told if not self._kept(spread)
        }
        if not self._layout:  # the first call, on every rank alike
            self._extend(local)
        packed, unknown = self._pack(local)
        total = self._all_reduce(packed)
        if total[0] > 0:  # some rank tracked a tensor the layout lacks
            self._extend(unknown)
            packed, _ = self._pack(local)
            total = self._all_reduce(packed)
        self.nonfinite = self._any_nonfinite(total)
        blocks = self._gather_blocks(local) if self._block_formats else {}
        if self.rank != 0:
            return [], []
        merged, per_rank = kept, []
        for key, entry, stats in self._unpack(total):
            stats.blocks = blocks.get(key, {})
            if key[2] is None:
                merged.append((entry, stats))
            else:
                per_rank.append((key[2], entry, stats))
        return merged, per_rank

    def _kept(self, spread: Spread) -> bool:
        """Whether a tensor of this ``spread`` stays here: held whole by rank 0, which
        writes."""
        return spread is Spread.WHOLE and self.rank == 0

    def _key(self, entry: Entry, apart: bool) -> Key:
        """Where ``entry`` travels: merged, or as this rank's own (``apart``)."""
        return (entry.name, entry.tensor_type, self.rank if apart else None)

    def _placed(self, entry: Entry) -> Entry:
        """``entry`` ordered among the pipeline stages."""
        return dataclasses.replace(entry, order=entry.order + self._offset)

    def _gather_blocks(self, local: dict) -> dict[Key, dict]:
        """Every tensor's block-format counts merged over the ranks that hold it, in rank
        order (on rank 0; every rank takes part)."""
        mine = {key: stats.blocks for key, (_, stats) in local.items() if stats.blocks}
        gathered: list = [None] * self.world
        collectively(dist.all_gather_object, gathered, mine, group=self.group)
        merged: dict[Key, dict] = {}
        for rank_blocks in gathered:
            for key, blocks in rank_blocks.items():
                known = merged.get(key)
                if known is not None:
                    blocks = {name: known[name].merge(blocks[name]) for name in known}
                merged[key] = blocks
        return merged

    def _any_nonfinite(self, total: np.ndarray) -> bool:
        start = 1
        for place in self._layout.values():
            head = total[start : start + self._head_length(place)]
            if head[0] > 0 and head[3:6].any():  # present; its NaN, +Inf, -Inf counts
                return True
            start += len(head)
        return False

    def _all_reduce(self, packed: np.ndarray) -> np.ndarray:
        tensor = torch.from_numpy(packed)
        if self.device is not None:
            tensor = tensor.to(self.device)
        collectively(dist.all_reduce, tensor, op=dist.ReduceOp.SUM, group=self.group)
        return tensor.cpu().numpy()

    def _head_length(self, place: Place) -> int:
        return 1 + len(COUNTS) + place.n_bins + 2 * len(self.formats)

    def _pack(self, local: dict[Key, tuple]) -> tuple[np.ndarray, dict]:
        """The packed vector in the agreed layout, and the local tensors it cannot hold."""
        places = list(self._layout.values())
        heads = [np.zeros(self._head_length(p)) for p in places]
        slots = np.zeros((self.world, len(places), _SLOT))
        seen = set()
        for i, (key, place) in enumerate(self._layout.items()):
            found = local.get(key)
            if found is None or not place.fits(found[1]):
                continue
            seen.add(key)
            s = found[1]
            head = heads[i]
            head[0] = 1  # present on this rank
            head[1 : 1 + len(COUNTS)] = [getattr(s, name) for name in COUNTS]
            lo = 1 + len(COUNTS) + s.hist_lo - place.hist_lo
            head[lo : lo + len(s.hist)] = s.hist
            head[len(head) - 2 * len(self.formats) :] = np.concatenate([s.underflow, s.overflow])
            slots[self.rank, i] = [s.finite_count, *(s.moments[name] for name in MOMENTS)]
        unknown = {key: found for key, found in local.items() if key not in seen}
        packed = np.concatenate([[float(len(unknown))], *heads, slots.ravel()])
        return packed, unknown

    def _extend(self, unknown: dict[Key, tuple[Entry, TensorStats]]) -> None:
        """Every rank's unknown tensors into the layout, in the same order on all ranks."""
        described = [
            (key, e.module_type, e.order + self._offset, s.dtype, s.hist_lo, len(s.hist))
            for key, (e, s) in unknown.items()
        ]
        gathered: list = [None] * self.world
        collectively(dist.all_gather_object, gathered, described, group=self.group)
        for rank_unknown in gathered:
            for key, module_type, order, dtype, hist_lo, n_bins in rank_unknown:
                place = self._layout.get(key)
                if place is None:
                    entry = Entry(key[0], key[1], module_type, order)
                    self._layout[key] = Place(entry, dtype, hist_lo, n_bins)
                else:
                    place.widen(dtype, hist_lo, n_bins)

    def _unpack(self, total: np.ndarray) -> list[tuple[Key, Entry, TensorStats]]:
        places = list(self._layout.values())
        slots = total[len(total) - self.world * len(places) * _SLOT :]
        slots = slots.reshape(self.world, len(places), _SLOT)
        combined, start = [], 1
        for i, (key, place) in enumerate(self._layout.items()):
            head = np.rint(total[start : start + self._head_length(place)]).astype(np.int64)
            start += len(head)
            if head[0] > 0:
                combined.append((key, place.entry, self._stats(place, head[1:], slots[:, i])))
        return combined

    def _stats(self, place: Place, counts: np.ndarray, rows: np.ndarray) -> TensorStats:
        """Summed counts and bins; the ranks' moments merged in rank order."""
        n_counts, n_formats = len(COUNTS), len(self.formats)
        per_rank = [self._moments_only(place, int(row[0]), row[1:]) for row in rows]
        casts = counts[n_counts + place.n_bins :]
        return TensorStats(
            place.dtype,
            *(int(c) for c in counts[:n_counts]),
            hist_lo=place.hist_lo,
            hist=counts[n_counts : n_counts + place.n_bins],
            formats=self.formats,
            underflow=casts[:n_formats],
            overflow=casts[n_formats:],
            moments=functools.reduce(TensorStats.merge, per_rank).moments,
        )

    def _moments_only(self, place: Place, finite: int, moments: np.ndarray) -> TensorStats:
        """A ``TensorStats`` carrying one rank's moments (and finite count) alone."""
        zeros = np.zeros(len(self.formats), dtype=np.int64)
        return TensorStats(
            place.dtype,
            finite,
            0,
            0,
            0,
            0,
            hist_lo=place.hist_lo,
            hist=np.zeros(0, dtype=np.int64),
            formats=self.formats,
            underflow=zeros,
            overflow=zeros,
            moments=dict(zip(MOMENTS, (float(m) for m in moments))),
        )
