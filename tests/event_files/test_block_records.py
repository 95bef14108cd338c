"""The block formats' section of a stored record (plugin data version 3): it round-trips,
readers that know nothing of it keep reading the rest, the one rule refuses a malformed
one on both decoders, and an older reader refuses the tag while a new one reads old tags."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tandv_tb.event_files import metadata, record_columns, small_loops
from tandv_tb.event_files.metadata import TagInfo, UnsupportedVersion
from tandv_tb.event_files.record_columns import decode_rows, decode_vector
from tandv_tb.event_files.summary import HEADER, encode_record, encode_varints
from tandv_tb.stats import tensor_stats

BLOCKS = ("mxfp4_e2m1", "nvfp4", "mxfp8_e4m3:rceil")
FORMATS = ("float8_e4m3fn", *BLOCKS)


def record(seed: int = 0):
    rng = np.random.default_rng(seed)
    values = (rng.standard_normal((6, 40)) * 2.0 ** rng.integers(-20, 20, (6, 40))).astype(
        np.float32
    )
    values[0, :5] = 0
    values[1, 3] = np.nan
    return tensor_stats(values, FORMATS).to_record()


def test_a_record_with_block_formats_round_trips():
    rec = record()
    assert set(rec.blocks) == set(BLOCKS) and set(rec.underflow) == {"float8_e4m3fn"}
    vector = encode_record(rec, ("float8_e4m3fn",), BLOCKS)
    back = decode_vector(vector, ("float8_e4m3fn",), BLOCKS)
    assert back.blocks == rec.blocks and back.underflow == rec.underflow  # (statistics
    assert np.array_equal(back.counts, rec.counts)  # are stored as float32: not compared)
    for name in BLOCKS:
        assert back.blocks[name].snr_db == rec.blocks[name].snr_db
        per_row = 3 if name == "nvfp4" else 2  # rows of 40: blocks of 16 or 32, one short
        assert back.blocks[name].blocks == 6 * per_row


def test_the_record_and_the_tag_must_agree_on_the_block_formats():
    with pytest.raises(ValueError, match="block formats"):
        encode_record(record(), ("float8_e4m3fn",), BLOCKS[:1])


def test_tags_with_block_formats_are_version_3_and_others_stay_version_2():
    plain = TagInfo("w", "Weight", formats=("float8_e4m3fn",)).to_metadata()
    blocked = TagInfo("w", "Weight", formats=(), block_formats=BLOCKS).to_metadata()
    assert json.loads(plain.plugin_data.content)["version"] == metadata.PLAIN_VERSION == 2
    content = json.loads(blocked.plugin_data.content)
    assert content["version"] == 3 and content["block_formats"] == list(BLOCKS)
    info = metadata.parse_plugin_metadata(blocked.plugin_data.content)
    assert info.block_formats == BLOCKS and info.version == 3


def test_an_older_reader_refuses_a_tag_with_block_formats(monkeypatch):
    content = TagInfo("w", "Weight", block_formats=BLOCKS).to_metadata().plugin_data.content
    monkeypatch.setattr(metadata, "PLUGIN_DATA_VERSION", metadata.PLAIN_VERSION)
    with pytest.raises(UnsupportedVersion, match="upgrade tandv_tb"):
        metadata.parse_plugin_metadata(content)


@pytest.mark.parametrize("bad", [["mxfp5_e2m2"], ["nvfp4:rceil"], "nvfp4", [3]])
def test_malformed_block_formats_in_the_metadata_are_refused(bad):
    content = json.dumps({**json.loads(TagInfo("w", "Weight").to_metadata().plugin_data.content),
                          "version": 3, "block_formats": bad})  # fmt: skip
    with pytest.raises(ValueError, match="malformed"):
        metadata.parse_plugin_metadata(content.encode())


def _rows(vectors, n_formats, n_blocks=None, compiled=False, monkeypatch=None):
    contents = [encode_varints(np.asarray(v, np.int64)) for v in vectors]
    data = np.frombuffer(b"".join(contents), dtype=np.uint8)
    sizes = np.array([len(c) for c in contents], dtype=np.int64)
    if compiled:
        monkeypatch.setattr(small_loops, "SMALL_BYTES", -1)
    n_formats = np.full(len(vectors), n_formats)
    blocks = None if n_blocks is None else np.full(len(vectors), n_blocks)
    return decode_rows(data, sizes, n_formats, n_blocks=blocks)


def _good_vector(seed=0):
    return encode_record(record(seed), ("float8_e4m3fn",), BLOCKS)


def _broken_vectors() -> dict[str, np.ndarray]:
    good = _good_vector()
    n_bins = int(good[HEADER - 1])
    tail = HEADER + n_bins + 2 + 9  # where the block section starts
    out = {}
    v = good.copy()
    v[tail] = 7  # announces more formats than it holds
    out["count"] = v
    out["cut"] = good[:-1]
    out["longer"] = np.concatenate([good, [0]])
    v = good.copy()
    v[tail + 1] = -1  # a negative underflow
    out["negative"] = v
    v = good.copy()
    v[tail + 6] = 0  # scale_lo of -128, below E8M0's range
    out["range"] = v
    return out


@pytest.mark.parametrize("compiled", [False, True])
def test_both_decoders_keep_good_sections_and_refuse_broken_ones(compiled, monkeypatch):
    broken = _broken_vectors()
    vectors = [_good_vector(0), *broken.values(), _good_vector(1)]
    rows = _rows(vectors, 1, len(BLOCKS), compiled, monkeypatch)
    assert rows.kept.tolist() == [0, len(vectors) - 1]
    first = record_columns.to_record(rows, 0, ("float8_e4m3fn",), BLOCKS)
    assert first.blocks == record(0).blocks
    # Readers that pass no block count (the store, findings) keep every well-formed row,
    # and its other parts are read as ever.
    rows = _rows([_good_vector(0), broken["negative"]], 1, None, compiled, monkeypatch)
    assert rows.kept.tolist() == [0]
    assert record_columns.to_record(rows, 0, ("float8_e4m3fn",)).underflow == record(0).underflow


def test_a_section_where_the_tag_has_none_is_refused_and_named():
    with pytest.raises(ValueError, match="block formats section"):
        decode_vector(_good_vector(), ("float8_e4m3fn",), ())
    plain = encode_record(tensor_stats(np.ones(3, np.float32), ()).to_record(), ())
    with pytest.raises(ValueError, match="block formats section"):
        decode_vector(plain, (), ("nvfp4",))
    assert decode_vector(plain, ()) is not None
