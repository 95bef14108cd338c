"""The non-finite watch's record: which tracked tensors held NaN or Inf at a step.

The trackers watch every step (tracked or not) for NaN/Inf in the tensors they track and,
at a step where some were found, write one extra value into that step's event: the tag
``tandv/_nonfinite`` (plugin ``tandv``, ``DATA_CLASS_TENSOR``, plugin content
``{"version": 2, "kind": "nonfinite"}``), whose tensor is a 0-d ``DT_STRING`` holding
UTF-8 JSON, a list in execution order of
``{"tensor_type": str, "name": str, "nan": int, "posinf": int, "neginf": int}``.
Steps without NaN/Inf write nothing. Every value carries its metadata (the tag is written
rarely), so a reader finds it in any event file of the run. The record of a step at which
the tracker stopped training (``on_nonfinite="raise"``) says so in its own metadata,
``"stopped": true``: readers of older versions ignore the key.

Entries are in execution order (``metadata.execution_key``): activations (and module
inputs) in forward order, then gradients in backward order, then weight gradients, then
weights and optimizer state as read at ``step()``. ``tandv_tb.event_files.nonfinite`` reads them
back from a logdir.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence

from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from tandv_tb.event_files.metadata import (
    NONFINITE_KIND,
    PLAIN_VERSION,
    PLUGIN_NAME,
    execution_phase,
    plugin_metadata,
)

#: The tag of the watch's record (one per run).
NONFINITE_TAG = f"{PLUGIN_NAME}/_nonfinite"
_COUNTS = ("nan", "posinf", "neginf")


@dataclasses.dataclass(frozen=True)
class NonfiniteEntry:
    """One tensor that held NaN/Inf at a step, with how many of each."""

    tensor_type: str
    name: str
    nan: int
    posinf: int
    neginf: int


@dataclasses.dataclass(frozen=True)
class NonfiniteStep:
    """The non-finite tensors of one step of one run, in execution order."""

    run: str
    step: int
    entries: tuple[NonfiniteEntry, ...]
    stopped: bool = False  # the tracker stopped training at this step


def _merge_rank(tensor_type: str) -> int:
    """Where entries of a tensor type go in ``merge``: the phases read at ``step()`` by
    their execution order, while the forward and backward passes share one rank, so that
    they keep the order observed. Hooks observe those passes in execution order already,
    and entries gathered from several ranks stay in rank order within them."""
    return max(execution_phase(tensor_type), 1)


def merge(found: Iterable[tuple[str, str, Sequence[int]]]) -> list[NonfiniteEntry]:
    """``(name, tensor_type, (nan, posinf, neginf))`` in the order observed, as entries in
    execution order: one per (name, tensor type), counts added, tensors without NaN/Inf
    left out."""
    totals: dict[tuple[str, str], list[int]] = {}
    for name, tensor_type, counts in found:
        total = totals.setdefault((name, tensor_type), [0, 0, 0])
        for i, count in enumerate(counts):
            total[i] += int(count)
    keys = sorted(totals, key=lambda key: _merge_rank(key[1]))  # stable
    return [NonfiniteEntry(t, n, *totals[n, t]) for n, t in keys if any(totals[n, t])]


def entries_from_stats(results: Iterable[tuple[str, str, object]]) -> list[NonfiniteEntry]:
    """The entries of a tracked step from its ``(name, tensor_type, TensorStats)``."""
    return merge(
        (name, tensor_type, (s.nan_count, s.posinf_count, s.neginf_count))
        for name, tensor_type, s in results
    )


def _count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"non-finite entry: {field!r} should be an int >= 0, got {value!r}")
    return value


def _entry(item: object) -> NonfiniteEntry:
    """One entry from its JSON object (or a ``NonfiniteEntry``), checked."""
    if isinstance(item, NonfiniteEntry):
        item = dataclasses.asdict(item)
    if not isinstance(item, dict):
        raise ValueError(f"non-finite entry: expected an object, got {type(item).__name__}")
    for field in ("tensor_type", "name"):
        if not isinstance(item.get(field), str):
            raise ValueError(
                f"non-finite entry: {field!r} should be a string, got {item.get(field)!r}"
            )
    counts = [_count(item.get(field), field) for field in _COUNTS]
    return NonfiniteEntry(item["tensor_type"], item["name"], *counts)


def encode_nonfinite(
    entries: Iterable[NonfiniteEntry], stopped: bool = False
) -> summary_pb2.Summary.Value:
    """The summary value of one step's non-finite tensors (``ValueError`` for a bad one);
    ``stopped``: training was stopped at this step."""
    checked = [dataclasses.asdict(_entry(entry)) for entry in entries]
    payload = json.dumps(checked, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        string_val=[payload],
    )
    content: dict = {"version": PLAIN_VERSION, "kind": NONFINITE_KIND}
    if stopped:
        content["stopped"] = True
    metadata = plugin_metadata(content)
    return summary_pb2.Summary.Value(tag=NONFINITE_TAG, metadata=metadata, tensor=tensor)


def stopped_at(value: summary_pb2.Summary.Value) -> bool:
    """Whether a record's own metadata says that training was stopped at its step."""
    try:
        content = json.loads(value.metadata.plugin_data.content or b"{}")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(content, dict) and content.get("stopped") is True


def decode_nonfinite(tensor: tensor_pb2.TensorProto) -> list[NonfiniteEntry]:
    """The entries stored in one value's tensor; ``ValueError`` saying what is malformed."""
    if tensor.dtype != types_pb2.DT_STRING:
        raise ValueError(
            f"non-finite record: expected a DT_STRING tensor, got dtype {tensor.dtype}"
        )
    if tensor.tensor_shape.dim or len(tensor.string_val) != 1:
        dims = [d.size for d in tensor.tensor_shape.dim]
        raise ValueError(
            f"non-finite record: expected one string (a 0-d tensor), got shape {dims} "
            f"holding {len(tensor.string_val)} strings"
        )
    try:
        data = json.loads(tensor.string_val[0].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"non-finite record: not UTF-8 JSON ({error})") from None
    if not isinstance(data, list):
        raise ValueError(f"non-finite record: expected a JSON list, got {type(data).__name__}")
    return [_entry(item) for item in data]
