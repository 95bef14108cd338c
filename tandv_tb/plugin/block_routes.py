"""The block-scaled formats in the routes (``http_api.md``): how a block format is listed,
what one record of it shows (the histogram's overlay: the shares lost and the scale
distribution), and the ``blocks`` route, every step of it (its CSV has a column per
format and count, and per scale exponent).

A block format that a layer did not record is never estimated: asking for it answers 400
with ``BlockFormat.not_recorded``'s message (give it to ``formats=``). The one module of
the plugin that tells the formats' kinds apart (``split_formats``): the blocks route and a
histogram show block formats apart from element formats."""

from __future__ import annotations

import numpy as np
from tensorboard.errors import InvalidArgumentError

from tandv_tb.event_files.record import BlockCounts, snr_db
from tandv_tb.formats import BlockFormat, ElementFormat, Format, block_format, split_formats
from tandv_tb.formats.blocks import NAMES_TEXT, is_block_format, with_rules
from tandv_tb.plugin.downsample import window
from tandv_tb.plugin.listing import RunIndex, TagEntry
from tandv_tb.plugin.responses import Numbers

#: The counts a block format shows per record, in the order the routes list them.
COUNT_COLUMNS = ("underflow", "overflow", "blocks", "zero_blocks", "clamped_low", "clamped_high")


def listing() -> list[dict]:
    """Every block format (``with_rules``) as the ``formats`` route lists it."""
    return [block_format_json(block) for block in with_rules()]


def block_format_json(block: BlockFormat) -> dict:
    """A block format as ``formats`` lists it: its element format and block size, its scale
    rule and the range of its scale exponents (where clamped blocks lie)."""
    lowest, highest = block.scale_exponents
    return {
        "format": block.name,
        "element": block.element,
        "block_size": block.block_size,
        "scale_rule": block.rule_name,
        "element_max": block.max,
        "scale_min_exponent": lowest,
        "scale_max_exponent": highest,
    }


def block_counts_json(name: BlockFormat, counts: BlockCounts) -> dict:
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


def split_asked(asked: list[Format]) -> tuple[list[ElementFormat], list[BlockFormat]]:
    """The formats asked of a histogram: its element formats' overlays, and its block
    formats, shown apart."""
    elements, blocks = split_formats(tuple(asked))
    return list(elements), list(blocks)


def check_recorded(format: BlockFormat, entries: list[TagEntry], where: str) -> None:
    """400 with ``not_recorded``'s message where none of ``entries`` recorded the block
    format (layers that did not, beside some that did, show no data)."""
    if entries and not any(format in e.info.block_formats for e in entries):
        raise InvalidArgumentError(format.not_recorded(where))


def layer_block_formats(
    entry: TagEntry, asked: list[BlockFormat] | None, run: str
) -> list[BlockFormat]:
    """The block formats to show for one layer: those ``asked`` (400 for one it did not
    record), or every one it recorded where None are asked."""
    if asked is None:
        return list(entry.info.block_formats)
    for block in asked:
        if block not in entry.info.block_formats:
            where = f"{entry.info.tensor_type} {entry.info.name!r} of run {run!r}"
            raise InvalidArgumentError(block.not_recorded(where))
    return asked


def blocks(query, index: RunIndex) -> dict:
    """The ``blocks`` route: every held step of the block formats of some layers."""
    params = query.params
    tensor_type = params.text("tensor_type")
    entries = [index.layer(tensor_type, name) for name in params.texts("layer", required=True)]
    asked = []
    for name in params.texts("format"):
        if not is_block_format(name):
            raise InvalidArgumentError(
                f"the blocks route shows block-scaled formats ({NAMES_TEXT}); got {name!r} "
                "(element formats are in histogram and series)"
            )
        try:
            asked.append(block_format(name))
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
