"""``TagSteps``, the one index of rows sorted by (tag, step), against a plain dict of
(tag, step) -> row: bounds, the row of any (tag, step) (known or not), the steps held."""

from __future__ import annotations

import numpy as np
import pytest

from tandv_tb.store.rows import TagSteps


def _rows(seed: int) -> TagSteps:
    """Tags 3, 5, 9 and 40 at steps of their own (some shared, some not), sorted."""
    rng = np.random.default_rng(seed)
    tag_ids, steps = [], []
    for tag in (3, 5, 9, 40):
        held = np.sort(rng.choice(60, size=int(rng.integers(1, 30)), replace=False))
        tag_ids += [tag] * len(held)
        steps += held.tolist()
    return TagSteps(np.array(tag_ids, dtype=np.int32), np.array(steps, dtype=np.int64))


@pytest.mark.parametrize("seed", range(5))
def test_the_index_agrees_with_a_dict(seed):
    index = _rows(seed)
    reference = {
        (tag, step): row
        for row, (tag, step) in enumerate(zip(index.tag_ids.tolist(), index.steps.tolist()))
    }
    for tag in (3, 5, 9, 40, 4, -1, 41):
        start, end = index.bounds(tag)
        rows = sorted(row for (t, _), row in reference.items() if t == tag)
        assert list(range(start, end)) == rows
    rng = np.random.default_rng(seed + 100)
    asked_tags = rng.choice([3, 5, 9, 40, 0, 7, 41], size=500).astype(np.int64)
    asked_steps = rng.integers(-2, 64, size=500)
    expected = [reference.get((t, s), -1) for t, s in zip(asked_tags, asked_steps)]
    assert index.row_of(asked_tags, asked_steps).tolist() == expected
    assert index.row_of(index.tag_ids, index.steps).tolist() == list(range(len(index.steps)))
    assert index.unique_steps.tolist() == sorted(set(index.steps.tolist()))
    assert index.tags().tolist() == [3, 5, 9, 40]


def test_no_rows():
    index = TagSteps(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64))
    assert index.bounds(3) == (0, 0)
    assert index.row_of(np.array([3]), np.array([1])).tolist() == [-1]
    assert index.unique_steps.size == 0
