"""Which runs ``divergence`` compares: runs of one model, not different models that happen
to share a few tensor names (a JAX model and a PyTorch one both have an ``Activation``
called ``GPT``).

Two runs are **comparable** when each shares more than half of its tensors with the other:
the same tensor type, name and size (the largest ``numel`` recorded for it, so that a
smaller last batch does not count). A model trained twice shares all of them; a model
with tracked inputs against one without shares most; a JAX model against a PyTorch one
shares almost none. Any pair can still be compared on request (``tandv-tb findings
--compare RUN_A RUN_B``, the heatmap's *minus* menu).
"""

from __future__ import annotations

import dataclasses
import itertools

from tandv_tb.diagnosis.run_numerics import RunNumerics


def signature(numerics: RunNumerics) -> set[tuple[str, str, int]]:
    """Each tensor of the run as (type, name, largest numel)."""
    numel = numerics.columns["numel"]
    found = set()
    for g, info in enumerate(numerics.tensors):
        start, end = numerics.starts[g], numerics.starts[g + 1]
        size = int(numel[start:end].max()) if end > start else 0
        found.add((info.tensor_type, info.name, size))
    return found


@dataclasses.dataclass(frozen=True)
class Pair:
    """Two runs (in name order) and how many tensors they share."""

    a: str
    b: str
    shared: int
    tensors_a: int
    tensors_b: int

    @property
    def comparable(self) -> bool:
        return 2 * self.shared > max(self.tensors_a, self.tensors_b)


def pairs(runs: list[RunNumerics]) -> list[Pair]:
    """Every pair of ``runs``, in name order."""
    ordered = sorted(runs, key=lambda r: r.run)
    signatures = {r.run: signature(r) for r in ordered}
    return [
        Pair(
            a.run,
            b.run,
            len(signatures[a.run] & signatures[b.run]),
            len(signatures[a.run]),
            len(signatures[b.run]),
        )
        for a, b in itertools.combinations(ordered, 2)
    ]
