"""intern_tags: the distinct tags of scanned values, each decoded once, in order of first
appearance."""

from __future__ import annotations

import numpy as np

from tandv_tb.event_files.event_scan import scan_events
from tandv_tb.event_files.tag_intern import intern_tags
from tests.event_files.test_event_scan import _event, _joined, _value


def test_intern_tags_equals_a_dict_whatever_the_order():
    rng = np.random.default_rng(1)
    pool = ["", "a", "b", "ab", "é", "<b>", "a" * 40, "a" * 39 + "b"] + [
        f"t{k}" for k in range(700)
    ]
    order = [pool[k] for k in rng.integers(0, len(pool), 4000)] + pool * 2
    data, starts, ends = _joined([_event(*(_value(tag) for tag in order))])
    names, tag_index = intern_tags(data, scan_events(data, starts, ends))
    reference: dict[str, int] = {}
    expected = [reference.setdefault(tag, len(reference)) for tag in order]
    assert names == list(reference) and tag_index.tolist() == expected
