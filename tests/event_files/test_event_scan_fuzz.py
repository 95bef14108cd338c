"""scan_events on fuzzed bytes: for each event, either not ok or exactly protobuf's values,
and never a read outside its arrays (numba's bounds checks on)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2

from tests.event_files.test_event_scan import (
    _check,
    _event,
    _joined,
    _key,
    _len,
    _summary_event,
    _value,
)
from tests.helpers import REPO

_BOUNDS_CHECKED_FUZZ = """
import random, sys
from tests.event_files.test_event_scan_fuzz import _BASES
from tests.event_files.test_event_scan import _event, _joined, _value
from tandv_tb.event_files.event_scan import scan_events
from tandv_tb.event_files.tag_intern import intern_tags
rnd = random.Random(0)
for _ in range(int(sys.argv[1])):
    event = bytearray(rnd.choice(_BASES))
    for _ in range(rnd.randint(1, 4)):
        pos = rnd.randrange(len(event) + 1)
        event[pos : pos + rnd.randint(0, 2)] = rnd.randbytes(rnd.randint(0, 3))
    data, starts, ends = _joined([bytes(event), bytes(event[: rnd.randint(0, len(event))])])
    intern_tags(data, scan_events(data, starts, ends))
many = [_event(*(_value(f"tag{k}") for k in range(j, 3000, 2))) for j in range(2)]
intern_tags(data := _joined(many)[0], scan_events(*_joined(many)))
"""


@pytest.mark.slow
def test_no_out_of_bounds_access_under_numba_bounds_checking(tmp_path):
    """numba checks no index unless told: recompiled with bounds checks (a fresh cache),
    a fuzzed scan raises IndexError where it would read outside an array."""
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    subprocess.run(
        [sys.executable, "-c", _BOUNDS_CHECKED_FUZZ, "30000"], env=env, check=True, cwd=REPO
    )


def _base_events() -> list[bytes]:
    meta = summary_pb2.SummaryMetadata()
    meta.plugin_data.plugin_name = "tandv"
    meta.plugin_data.content = b'{"v": 2}'
    first = _value("a/é", dtype=4, tensor_content=bytes(range(40)), int64_val=[1, -5, 2**40])
    first.tensor.tensor_shape.dim.add(size=40)
    first.metadata.CopyFrom(meta)
    return [
        _event(first, _value("b", dtype=9, int64_val=[7] * 5), summary_pb2.Summary.Value(tag="s")),
        _event(summary_pb2.Summary.Value(tag="h", simple_value=2.0), step=2**40),
        _summary_event(_len(1, b"x") + _len(8, _key(10, 0) + b"\x07")),
        _summary_event(_len(1, b"y") + _len(9, _len(1, _len(1, b"p"))) + _len(8, _len(4, b"q"))),
        _event(
            summary_pb2.Summary.Value(
                tag="hist", histo=summary_pb2.HistogramProto(bucket_limit=[1.0, 2.0], bucket=[3, 4])
            ),
            summary_pb2.Summary.Value(tag="img", image=summary_pb2.Summary.Image(height=2)),
        ),
        event_pb2.Event(file_version="brain.Event:2", wall_time=2.0).SerializeToString(),
    ]


_BASES = _base_events()


@st.composite
def _mutated(draw) -> bytes:
    event = bytearray(draw(st.sampled_from(_BASES)))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(("flip", "set", "insert", "delete", "truncate")))
        pos = draw(st.integers(0, max(len(event) - 1, 0)))
        if op == "flip" and event:
            event[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and event:
            event[pos] = draw(st.sampled_from((0x00, 0x7F, 0x80, 0xFF, 0x02, 0x0A)))
        elif op == "insert":
            event[pos:pos] = draw(st.binary(min_size=1, max_size=11))
        elif op == "delete":
            del event[pos : pos + draw(st.integers(1, 3))]
        elif op == "truncate":
            del event[pos:]
    return bytes(event)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mutated(), min_size=1, max_size=4))
def test_fuzzed_events_are_exact_or_not_ok(events):
    _check(*_joined(events))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_are_exact_or_not_ok(raw):
    _check(*_joined([raw, raw[::-1]]))
