"""Runs written for the store's tests, and what the store holds of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tandv_tb.store import NumericsStore
from tandv_tb.writer import NumericsWriter, RecordItem
from tests.helpers.plugin import make_record

ROUTES = "/data/plugin/tandv/"  # the plugin's routes under TensorBoard


def write_run(run_dir: Path, steps: range, layers: int = 2, nan_at: int | None = None) -> None:
    """Write ``steps`` of ``layers`` float32 records (a NaN record at ``nan_at``)."""
    rng = np.random.default_rng(steps.start)
    with NumericsWriter(str(run_dir), formats=("float8_e4m3fn",)) as writer:
        for step in steps:
            kinds = ["nonfinite" if step == nan_at and i == 1 else "normal" for i in range(layers)]
            items = [
                RecordItem(f"layers.{i}", make_record(rng, "float32", ("float8_e4m3fn",), k))
                for i, k in enumerate(kinds)
            ]
            writer.add_records(step, [item._replace(order=i) for i, item in enumerate(items)])


def stored_steps(db: NumericsStore, run: str, tag: str = "tandv/Activation/layers.0") -> list[int]:
    """The steps the store holds for ``tag`` of ``run``, after reading new files."""
    db.refresh(run)
    tag_id = db.tags(run)[tag][0]
    return db.rows(run, [tag_id], ()).steps.tolist()
