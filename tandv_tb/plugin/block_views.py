"""The block-scaled formats in the routes (``http_api.md``): how a block format is listed,
what one record of it shows (the histogram's overlay: the shares lost and the scale
distribution), and the ``blocks`` route, every step of it (its CSV has a column per
format and count, and per scale exponent).

A block format that a layer did not record is never estimated: asking for it answers 400
with ``block_formats.not_recorded``'s message (give it to ``formats=``)."""

from __future__ import annotations

import numpy as np
from tensorboard.errors import InvalidArgumentError

from tandv_tb import block_formats
from tandv_tb.disk.record import BlockCounts
from tandv_tb.plugin.downsample import window
from tandv_tb.plugin.listing import RunIndex, TagEntry
from tandv_tb.plugin.responses import Numbers
from tandv_tb.plugin.snr import snr_db

#: The scale rules, as the routes name them.
RULES = {block_formats.FLOOR: "ocp", block_formats.RCEIL: "rceil", block_formats.NVFP4: "nvfp4"}
#: The counts a block format shows per record, in the order the routes list them.
COUNT_COLUMNS = ("underflow", "overflow", "blocks", "zero_blocks", "clamped_low", "clamped_high")


def block_format_json(name: str) -> dict:
    """A block format as ``formats`` lists it: its element format and block size, its scale
    rule and the range of its scale exponents (where clamped blocks lie)."""
    block = block_formats.block_format(name)
    lowest, highest = block_formats.scale_exponents(name)
    return {
        "format": block.name,
        "element": block.element,
        "block_size": block.block_size,
        "scale_rule": RULES[block.rule],
        "element_max": block.max,
        "scale_min_exponent": lowest,
        "scale_max_exponent": highest,
    }


def block_counts_json(name: str, counts: BlockCounts) -> dict:
    """One record of a block format, as the histogram shows it (always exact)."""
    block = counts.trimmed()
    return {
        **block_format_json(name),
        "exact": True,
        "underflow": block.underflow,
        "overflow": block.overflow,
        "blocks": block.blocks,
        "zero_blocks": block.zero_blocks,
        "clamped_low": block.clamped_low,
        "clamped_high": block.clamped_high,
        "scale_lo": block.scale_lo,
        "scales": Numbers(np.asarray(block.scales, dtype=np.int64)),
        "snr_db": block.snr_db,
    }


def is_block(name: str | None) -> bool:
    return name is not None and block_formats.is_block_format(name)


def check_recorded(format_name: str, entries: list[TagEntry], where: str) -> None:
    """400 with ``not_recorded``'s message where none of ``entries`` recorded the block
    format (layers that did not, beside some that did, show no data)."""
    if entries and not any(format_name in e.info.block_formats for e in entries):
        raise InvalidArgumentError(block_formats.not_recorded(format_name, where))


def layer_block_formats(entry: TagEntry, asked: list[str] | None, run: str) -> list[str]:
    """The block formats to show for one layer: those ``asked`` (400 for one it did not
    record), or every one it recorded where None are asked."""
    if asked is None:
        return list(entry.info.block_formats)
    for name in asked:
        if name not in entry.info.block_formats:
            where = f"{entry.info.tensor_type} {entry.info.name!r} of run {run!r}"
            raise InvalidArgumentError(block_formats.not_recorded(name, where))
    return asked


def blocks(query, index: RunIndex) -> dict:
    """The ``blocks`` route: every held step of the block formats of some layers."""
    params = query.params
    tensor_type = params.text("tensor_type")
    entries = [index.layer(tensor_type, name) for name in params.texts("layer", required=True)]
    asked = []
    for name in params.texts("format"):
        if not is_block(name):
            raise InvalidArgumentError(
                f"the blocks route shows block-scaled formats ({', '.join(block_formats.NAMES)}, "
                f"or an MX one with {block_formats.RCEIL_SUFFIX!r}); got {name!r} (element "
                "formats are in histogram and series)"
            )
        try:
            asked.append(block_formats.block_format(name).name)
        except ValueError as error:
            raise InvalidArgumentError(str(error)) from None
    low, high = params.step_window()
    store = query.numerics()
    layers = []
    for entry in entries:
        shown = []
        for name in layer_block_formats(entry, list(dict.fromkeys(asked)) or None, index.run):
            history = store.block_history(index.run, entry.tag, name)
            if history is None:  # listed by TensorBoard, not yet in the store
                continue
            kept = window(history.steps, low, high)
            columns = {k: v[kept] for k, v in history.columns.items()}
            scales = history.scales[kept]
            filled = np.flatnonzero(scales.any(axis=0))
            first = int(filled[0]) if len(filled) else 0
            last = int(filled[-1]) + 1 if len(filled) else 0
            shown.append(
                {
                    "format": name,
                    "steps": Numbers(history.steps[kept]),
                    **{k: Numbers(_count(columns, k)) for k in COUNT_COLUMNS},
                    "snr_db": Numbers(snr_db(columns["signal"], columns["error"])),
                    "scale_lo": history.scale_lo + first if len(filled) else 0,
                    "scales": Numbers(scales[:, first:last]),
                }
            )
        layers.append({"layer": entry.info.name, "formats": shown})
    return {"run": index.run, "tensor_type": tensor_type, "layers": layers}


def _count(columns: dict[str, np.ndarray], name: str) -> np.ndarray:
    return columns["total_blocks" if name == "blocks" else name]
