"""The store's tables: the one place their columns are written.

- ``runs``, ``files``: each run and each of its event files, with how far the file was
  read (``consumed`` bytes, ``n_values`` values) and its first bytes (``head``: a file
  whose head changed was replaced).
- ``tags``: each numerics tag's plugin metadata (from its first record) and how many of
  its records could not be read.
- ``records``: one row per numerics record, its counts and statistics as columns (what
  heatmaps and lines read, a column at a time), and where its stored vector (varint
  bytes, ``tandv_tb.event_files.summary``) lies in its event file (``vector_offset``; -1: kept
  inline in ``vector``, for a vector re-encoded from an old version).
- ``casts``: the exact under/overflow of each recorded format, one row per record and
  format (``format_index``: its place in the tag's ``formats``); ``blocks``: what each
  recorded block-scaled format does (``record.BlockCounts``: counts, every block
  (``total_blocks``) and the error's sums), one row per record and block format
  (``format_index`` in the tag's ``block_formats``); ``block_scales``: their blocks per
  scale exponent, a row per non-empty exponent; ``nonfinite``: the watch's entries
  (``stopped``: the tracker stopped training at that step);
  ``scalars``: TensorBoard's scalars (the loss); ``graphs``: the model's graph records
  (``tandv_tb.event_files.graph_record``), each its graph as JSON or why it could not be read,
  placed in its file by the end of the piece read (``piece_end``) and its place in it.
"""

from __future__ import annotations

from tandv_tb.event_files.record import COUNTS, STATISTICS
from tandv_tb.formats import BLOCKS, CASTS, BlockFormat, ElementFormat

#: Bump when the tables or their stored order change: a store of another version is
#: rebuilt, never misread.
SCHEMA_VERSION = 9

#: The SQL types of the columns a format holds per record (``Format.columns``): counts but
#: these.
_FORMAT_COLUMN_TYPES = {"exponent": "INTEGER", "signal": "DOUBLE", "error": "DOUBLE"}


def _typed(columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{name} {_FORMAT_COLUMN_TYPES.get(name, 'BIGINT')}" for name in columns)


#: Every table, with its columns in stored order.
#: The first columns of the tables with a row per record and format (casts, blocks, scales).
_PER_FORMAT = (
    "run_id INTEGER",
    "file_id INTEGER",
    "seq BIGINT",
    "tag_id INTEGER",
    "step BIGINT",
    "format_index TINYINT",
)

TABLES: dict[str, tuple[str, ...]] = {
    "meta": ("key VARCHAR", "value VARCHAR"),
    "runs": ("run_id INTEGER", "run VARCHAR"),
    "files": (
        "file_id INTEGER",
        "run_id INTEGER",
        "name VARCHAR",
        "consumed BIGINT",
        "n_values BIGINT",
        "head BLOB",
    ),
    "tags": ("run_id INTEGER", "tag_id INTEGER", "tag VARCHAR", "content BLOB", "malformed BIGINT"),
    "records": (
        "run_id INTEGER",
        "file_id INTEGER",
        "seq BIGINT",
        "tag_id INTEGER",
        "step BIGINT",
        "wall_time DOUBLE",
        "dtype_code TINYINT",
        *(f"{count} BIGINT" for count in COUNTS),
        *(f"{statistic} DOUBLE" for statistic in STATISTICS),
        "vector_offset BIGINT",
        "vector_size BIGINT",
        "vector BLOB",
    ),
    "nonfinite": (
        "run_id INTEGER",
        "file_id INTEGER",
        "step BIGINT",
        "position INTEGER",
        "tensor_type VARCHAR",
        "name VARCHAR",
        "nan BIGINT",
        "posinf BIGINT",
        "neginf BIGINT",
        "stopped BOOLEAN",
    ),
    "graphs": (
        "run_id INTEGER",
        "file_id INTEGER",
        "step BIGINT",
        "piece_end BIGINT",
        "position INTEGER",
        "graph VARCHAR",
        "problem VARCHAR",
    ),
    "scalars": (
        "run_id INTEGER",
        "file_id INTEGER",
        "seq BIGINT",
        "tag VARCHAR",
        "step BIGINT",
        "wall_time DOUBLE",
        "value DOUBLE",
    ),
    CASTS: (*_PER_FORMAT, *_typed(ElementFormat.columns)),
    BLOCKS: (*_PER_FORMAT, *_typed(BlockFormat.columns)),
    "block_scales": (
        *_PER_FORMAT,
        "scale_exponent INTEGER",
        "n_blocks BIGINT",
    ),
}

#: The tables of rows read from an event file (their ``file_id`` names it): one chunk's rows
#: of each are written in one transaction, and a file's rows are dropped with it.
FILE_ROWS = tuple(
    name
    for name, columns in TABLES.items()
    if name != "files" and any(column.startswith("file_id ") for column in columns)
)

#: The scalar columns of ``records`` a read may ask for (``step`` and ``tag_id`` always come).
RECORD_COLUMNS = ("dtype_code", *COUNTS, *STATISTICS, "wall_time")


def create_tables(connection) -> None:
    """Make every table in an empty database, and mark it with ``SCHEMA_VERSION``."""
    for name, columns in TABLES.items():
        connection.execute(f"CREATE TABLE {name} ({', '.join(columns)})")
    connection.execute("INSERT INTO meta VALUES ('schema', ?)", [str(SCHEMA_VERSION)])
