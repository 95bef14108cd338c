"""Reading back what a tracker wrote, with TensorBoard's own event-file loader (shared by
the PyTorch and JAX tracker tests)."""

from __future__ import annotations

import dataclasses
import glob
import os

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util

from tandv_tb.event_files import metadata, record_columns
from tandv_tb.event_files.record import NumericsRecord


@dataclasses.dataclass
class Stored:
    """One record read back from an event file, with its tag's metadata."""

    record: NumericsRecord
    module_type: str
    order: int
    formats: tuple[str, ...]


def read_records(logdir: str) -> dict[tuple[str, str, int], Stored]:
    """Every numerics record under ``logdir``: ``(name, tensor_type, step) -> Stored``,
    names and types from the plugin metadata (which only a tag's first record carries)."""
    out: dict[tuple[str, str, int], Stored] = {}
    infos: dict[str, metadata.TagInfo] = {}
    pattern = os.path.join(logdir, "events.out.tfevents.*")
    for path in sorted(glob.glob(pattern)):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                meta = value.metadata
                content = meta.plugin_data.content
                if meta.plugin_data.plugin_name == metadata.PLUGIN_NAME:
                    if metadata.plugin_kind(content) != metadata.NUMERICS_KIND:
                        # the non-finite watch's record (tandv_tb.event_files.nonfinite_record)
                        continue
                    infos[value.tag] = metadata.parse_plugin_metadata(content)
                info = infos.get(value.tag)
                if info is None:
                    continue
                record = record_columns.decode_tensor(tensor_util.make_ndarray(value.tensor), info)
                key = (info.name, info.tensor_type, event.step)
                assert key not in out, f"two records for {key}"
                out[key] = Stored(record, info.module_type, info.order, info.formats)
    return out
