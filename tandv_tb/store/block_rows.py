"""The ``blocks`` and ``block_scales`` rows of a chunk's records (``schema``): what each
recorded block-scaled format does, decoded from the records' block formats sections
(``block_columns.BlockEntries``) and stored in the order of their records."""

from __future__ import annotations

import numpy as np

from tandv_tb.event_files.block_columns import BlockEntries
from tandv_tb.event_files.summary import BLOCK_HEAD
from tandv_tb.filesystems.ranges import ragged_index

#: Rows to append: column name -> numpy array, in the table's column order.
Columns = dict[str, np.ndarray]


def block_rows(
    records: Columns, entries: BlockEntries, order: np.ndarray
) -> tuple[Columns | None, Columns | None]:
    """The ``blocks`` and ``block_scales`` rows (None: none) of the ``records`` rows, which
    are the decoded rows at ``order`` whose sections ``entries`` holds."""
    n_entries = np.diff(entries.row_starts)[order]
    if not n_entries.any():
        return None, None
    taken = ragged_index(entries.row_starts[:-1][order], n_entries)
    record = np.repeat(np.arange(len(order)), n_entries)
    n = len(taken)
    key = {name: records[name][record] for name in ("run_id", "file_id", "seq", "tag_id", "step")}
    key["format_index"] = entries.format_index[taken].astype(np.int8)
    counts = entries.counts[taken]
    sizes = np.diff(entries.scale_starts)[taken]
    scales = entries.scales[ragged_index(entries.scale_starts[taken], sizes)]
    per_entry = np.repeat(np.arange(n), sizes)
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, per_entry, scales)
    blocks = {
        **key,
        **{name: np.ascontiguousarray(counts[:, i]) for i, name in enumerate(BLOCK_HEAD)},
        "total_blocks": total + counts[:, BLOCK_HEAD.index("zero_blocks")],
        "exponent": entries.exponent[taken].astype(np.int32),
        "signal": entries.signal[taken],
        "error": entries.error[taken],
    }
    filled = scales > 0
    within = np.arange(len(scales)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    exponents = np.repeat(entries.scale_lo[taken], sizes) + within
    at = per_entry[filled]
    block_scales = {name: values[at] for name, values in key.items()}
    block_scales["scale_exponent"] = exponents[filled].astype(np.int32)
    block_scales["n_blocks"] = scales[filled]
    return blocks, block_scales if filled.any() else None
