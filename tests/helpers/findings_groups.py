"""The contract's grouping key, checked on grouped findings as ``--json`` prints them (each
group with the list of its findings), from the findings one per tensor alone.

Where many tensors share one condition, one group: the same run, kind, format and tensor
type. The key is computed here without the engine: the format is the one a finding's
sentence names. The refinements the engine documents (``tandv_tb.diagnosis.grouping``)
are computed the same way: an ``overflow`` also by severity, a ``scale`` of an element
format by whether its tensor underflows in that format (a block format's scale remedies
nothing); ``loss_spike`` by run only, ``divergence`` by its pair.
"""

from __future__ import annotations

import functools
import re

from tandv_tb import formats
from tandv_tb.formats import blocks as block_formats

SPLIT_BY_RUN_ONLY = {"loss_spike", "divergence"}


@functools.cache
def _is_format(word: str) -> bool:
    """Whether ``word`` is a format's own name (not numpy's shorthand, such as "e"): an
    element format's or a block-scaled format's."""
    try:
        if block_formats.is_block_format(word):
            return block_formats.block_format(word).name == word
        return formats.info(word).name == word
    except (KeyError, ValueError, TypeError):
        return False


def format_named(message: str) -> str:
    """The one format a finding's sentence names ("" for none)."""
    words = re.findall(r"[A-Za-z]\w*(?::rceil)?", message)
    named = {word for word in words if _is_format(word)}
    assert len(named) <= 1, (message, named)
    return named.pop() if named else ""


def pair_named(message: str) -> str:
    """The two runs a ``divergence`` names ("runs 'a' and 'b' part at step ...")."""
    return message.split(" part at step ")[0]


def contract_key(finding: dict, underflowing: set[tuple]) -> tuple:
    run, kind = finding["run"], finding["kind"]
    if kind == "loss_spike":
        return (run, kind)
    if kind == "divergence":
        return (run, kind, pair_named(finding["message"]))
    where = (format_named(finding["message"]), finding["tensor_type"])
    key = (run, kind, *where, finding["severity"])
    if kind == "scale" and not block_formats.is_block_format(where[0]):
        key += ((run, *where, finding["name"]) in underflowing,)
    return key


def check_groups(groups: list[dict], every: list[dict]) -> None:
    """``groups`` (with their ``findings`` as objects) against ``every`` finding one per
    tensor: each finding in exactly one group, a group per key and a key per group, the
    group's ``tensors`` the number of its findings (one per tensor; a ``nonfinite`` is one
    finding, naming the first of the tensors it counts), its columns its findings'."""
    assert sorted(map(_identity, (f for g in groups for f in g["findings"]))) == sorted(
        map(_identity, every)
    )
    underflowing = {
        (f["run"], format_named(f["message"]), f["tensor_type"], f["name"])
        for f in every
        if f["kind"] == "underflow"
    }
    keys = []
    for group in groups:
        members = group["findings"]
        (key,) = {contract_key(f, underflowing) for f in members}
        keys.append(key)
        first = members[0]
        assert (group["run"], group["kind"], group["severity"]) == (
            first["run"],
            first["kind"],
            first["severity"],
        )
        assert group["step"] == min(f["step"] for f in members) == first["step"]
        if group["kind"] not in SPLIT_BY_RUN_ONLY:
            assert group["tensor_type"] == first["tensor_type"]
        if group["kind"] == "nonfinite":
            assert len(members) == 1 and group["tensors"] >= 1
        else:
            assert group["tensors"] == len(members)
        if group["kind"] not in SPLIT_BY_RUN_ONLY | {"nonfinite"}:
            tensors = {(f["tensor_type"], f["name"]) for f in members}
            assert len(tensors) == len(members)  # one finding per tensor
    assert len(keys) == len(set(keys)), "two groups with one key"


def power_range(ks) -> str:
    """ "2^k" or "2^low to 2^high": how a sentence gives a range of scales (numpy ints)."""
    return f"2^{ks.min()}" if ks.min() == ks.max() else f"2^{ks.min()} to 2^{ks.max()}"


def _identity(finding: dict) -> str:
    return repr(sorted((k, v) for k, v in finding.items() if k != "value"))
