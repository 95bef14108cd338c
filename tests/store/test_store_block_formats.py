"""A run that records block-scaled formats (plugin data version 3) in the plugin's store,
before the store knows them (phase B of issue 30): every step is kept, with its element
formats' exact casts, and nothing refuses the run."""

from __future__ import annotations

import numpy as np

from tandv_tb.store import NumericsStore
from tandv_tb.writer import NumericsWriter


def test_a_run_with_block_formats_is_stored_whole(tmp_path):
    run = tmp_path / "logs" / "blocks"
    rng = np.random.default_rng(0)
    with NumericsWriter(str(run), formats=("float8_e4m3fn", "mxfp4_e2m1", "nvfp4")) as writer:
        for step in range(5):
            values = (rng.standard_normal((4, 64)) * 300).astype(np.float32)
            writer.add_numerics("layers.0", values, step)
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    try:
        db.refresh("blocks")
        tag_id, info, _ = db.tags("blocks")["tandv/Activation/layers.0"]
        assert info.formats == ("float8_e4m3fn",) and info.block_formats == ("mxfp4_e2m1", "nvfp4")
        assert db.rows("blocks", [tag_id], ()).steps.tolist() == list(range(5))
        casts = db.casts("blocks", {tag_id: 0})
        assert casts.steps.tolist() == list(range(5))
        assert int(np.sum(casts.columns["overflow"])) > 0  # float8_e4m3fn's, exact
    finally:
        db.close()
