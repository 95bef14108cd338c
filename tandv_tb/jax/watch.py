"""The JAX tracker's non-finite watch: NaN/Inf counts of what it tracks, on untracked steps.

On an untracked step a jitted function given to ``intercept`` runs as a second compiled
variant of it (made once, like the tracked one) that also returns, for every module output
and cotangent, its NaN, +Inf and -Inf counts, packed in one small integer array; an
un-jitted one is evaluated with the same counts computed as it goes. A ``jax.jit``
variant also counts every float array it returns: the arrays given to ``step()`` are
usually that call's outputs (the new weights and optimizer state, the gradients), whose
counts ``step()`` then takes from there, found by identity (on the reference workload
``step()`` took 5.1 ms of CPU a step with the 280 arrays counted by a second compiled
program, 2.8 ms without it; with this and the reduction of ``count_scalars`` below, the
untracked step cost 1.031x of plain in CPU time against 1.063x). Other
arrays given to ``step()`` are counted in one compiled program. Everything stays on its
device until ``step()`` reads it all in one ``jax.device_get``.

Inside the compiled variant each module output and cotangent is counted where XLA
schedules it, and the counts of all arrays are stacked in one operation (the watched
program of the reference workload cost 1.041x of the user's before, 1.027x with the one
stack, 20 rounds). Tying each count to its array by a
``lax.optimization_barrier``, so that it read the array right after it was computed, was
tried and taken out: on a quiet machine it cost more than it saved (1.039-1.052x of the
user's program against 1.021-1.026x without it, three runs of 30 pairs; 1.060x against
1.013x beside a busy core; ``bench/RESULTS.md``).

The three counts are one variadic ``lax.reduce``: a single pass over the array (three
separate sums are not fused by XLA's CPU backend: 30 ms against 0.67 ms for 10 M float32
values, where a plain ``sum`` takes 0.9 ms). Counts are int32 (int64 with
``jax_enable_x64``).
"""

from __future__ import annotations

import dataclasses
import weakref

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tandv_tb.event_files.nonfinite_record import NonfiniteEntry, merge
from tandv_tb.jax.collector import Collector
from tandv_tb.stats.engine import Packed, Slot


def _int_dtype():
    return jnp.int64 if jax.config.jax_enable_x64 else jnp.int32


def count_scalars(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``nan, posinf, neginf`` of ``x`` as three scalars, in one pass (traceable).

    The reduction runs over all of ``x``'s dimensions as they are: flattening it first
    cost more inside the watched program, likely a copy of arrays XLA keeps in another
    layout than row-major (the watched step of the reference workload cost 1.068x of
    plain in CPU time with ``ravel``, 1.046x without, same run). A compiled
    program stacks the scalars of all its arrays at once (``stack_counts``).
    """
    kind = _int_dtype()
    zero = jnp.zeros((), kind)
    flags = (jnp.isnan(x).astype(kind), (x == jnp.inf).astype(kind), (x == -jnp.inf).astype(kind))
    return lax.reduce(
        flags,
        (zero, zero, zero),
        lambda a, b: (a[0] + b[0], a[1] + b[1], a[2] + b[2]),
        tuple(range(jnp.ndim(x))),
    )


def stack_counts(arrays: list) -> jax.Array:
    """The counts of ``arrays``, one row each (traceable), stacked in one operation (a
    stack per array made XLA's CPU backend run one more small kernel per array)."""
    if not arrays:
        return jnp.zeros((0, 3), _int_dtype())
    return jnp.stack([c for x in arrays for c in count_scalars(x)]).reshape(-1, 3)


_counts_of = jax.jit(stack_counts)


def _float_leaves(tree: object) -> list:
    return [
        x
        for x in jax.tree_util.tree_leaves(tree)
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating)
    ]


def output_counts(outputs: object) -> jax.Array:
    """The counts of every float array of ``outputs``, one row each, in the order of
    ``jax.tree_util.tree_leaves`` (traced: ``TrackedFunction``'s ``count_outputs``)."""
    return stack_counts(_float_leaves(outputs))


class WatchCollector(Collector):
    """A ``Collector`` that keeps only each value's NaN/Inf counts."""

    def _pending(self, x: jax.Array) -> tuple[jax.Array, ...] | jax.Array:
        """``x``'s counts (also of an input deferred to ``finish``): three scalars in a
        trace, stacked by ``pack``; outside one, an array of the three."""
        known = self._computed.get(id(x))
        if known is not None and known[0] is x:
            return known[1]
        found = count_scalars(x) if isinstance(x, jax.core.Tracer) else _counts_of([x])[0]
        self._computed[id(x)] = (x, found)
        return found

    def pack(self) -> tuple[list[Slot], jax.Array, jax.Array]:
        slots = [Slot((n, t, m), "", (), 3, 0) for n, t, m, _ in self.entries]
        scalars = [c for *_, found in self.entries for c in found]
        packed = jnp.stack(scalars) if scalars else jnp.zeros(0, _int_dtype())
        return slots, packed, jnp.zeros(0, jnp.float32)


@dataclasses.dataclass
class _StepArrays:
    """The arrays read at one ``step()``: each one's name and tensor type, and where its
    counts are: ``(index in sources, row)``."""

    names: list[tuple[str, str]]
    rows: list[tuple[int, int]]
    sources: list[jax.Array]


class WatchResults:
    """One untracked step's counts, still on their devices, in the order recorded."""

    def __init__(self) -> None:
        # a compiled call's counts; one value's (name, tensor type, counts); or the arrays
        # read at step()
        self._parts: list[Packed | tuple[str, str, jax.Array] | _StepArrays] = []
        # id(array) -> (a weak reference to it, its call's output counts, its row): the
        # float outputs of this step's compiled calls (weak: a call's outputs the user
        # drops, as in gradient accumulation, are not kept alive until ``step()``)
        self._outputs: dict[int, tuple[weakref.ref, jax.Array, int]] = {}

    def add_packed(
        self, pack: Packed, outputs: object = None, output_counts: jax.Array | None = None
    ) -> None:
        """A compiled call's counts; with ``output_counts`` (``output_counts`` of the call's
        ``outputs``), ``add_arrays`` then finds those outputs counted."""
        self._parts.append(pack)
        if output_counts is not None:
            for row, leaf in enumerate(_float_leaves(outputs)):
                self._outputs[id(leaf)] = (weakref.ref(leaf), output_counts, row)

    def add(self, entries: list[tuple[str, str, str, jax.Array]]) -> None:
        self._parts += [(name, tensor_type, found) for name, tensor_type, _, found in entries]

    def add_arrays(self, named: list[tuple[str, str, object]]) -> None:
        """Arrays read at ``step()`` (weights, gradients, optimizer state): a compiled
        call's outputs by their counts from it, the others counted in one program."""
        if not named:
            return
        sources: list[jax.Array] = []
        where: dict[int, int] = {}  # id(count array) -> its index in sources
        rows: list[tuple[int, int]] = []
        uncounted = []
        for _, _, value in named:
            known = self._outputs.get(id(value))
            if known is not None and known[0]() is value:
                index = where.setdefault(id(known[1]), len(sources))
                if index == len(sources):
                    sources.append(known[1])
                rows.append((index, known[2]))
            else:
                rows.append((-1, len(uncounted)))
                uncounted.append(value)
        if uncounted:
            sources.append(_counts_of(uncounted))
            rows = [(len(sources) - 1 if i < 0 else i, row) for i, row in rows]
        self._parts.append(_StepArrays([(n, t) for n, t, _ in named], rows, sources))

    def drain(self, keep_outputs: bool = False) -> list[NonfiniteEntry]:
        """The step's entries in execution order, after one transfer; empty afterwards,
        but for the counts of the compiled calls' outputs with ``keep_outputs`` (read in
        the middle of a step: ``add_arrays`` still finds them there at ``step()``).
        (The rows are picked on the host: indexing a jax array costs 40 us.)"""
        parts, self._parts = self._parts, []
        if not keep_outputs:
            self._outputs = {}
        host = jax.device_get(
            [
                (p.layout, p.counts)
                if isinstance(p, Packed)
                else p.sources
                if isinstance(p, _StepArrays)
                else p[-1]
                for p in parts
            ]
        )
        observed = []
        for part, fetched in zip(parts, host):
            if isinstance(part, Packed):
                layout, packed = fetched
                slots = part.layouts[int(layout)]
                rows = np.asarray(packed).reshape(len(slots), 3)
                observed += [(*s.label[:2], row) for s, row in zip(slots, rows)]
            elif isinstance(part, _StepArrays):
                arrays = [np.asarray(a) for a in fetched]
                observed += [(n, t, arrays[i][r]) for (n, t), (i, r) in zip(part.names, part.rows)]
            else:
                observed.append((part[0], part[1], fetched))
        return merge(observed)

    def __len__(self) -> int:
        return len(self._parts)
