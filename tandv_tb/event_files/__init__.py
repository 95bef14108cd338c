"""The event-file format: what the trackers write and every reader reads, wherever the files
live (a local folder or object storage).

Below the statistics engine and every reader (it imports neither), above ``formats`` and
``filesystems`` (where the files live): ``metadata`` (the per-tag plugin metadata, tensor
types and their orders), ``record`` (``NumericsRecord``, the contract's ``STATISTICS``
and ``COUNTS``, ``snr_db``), ``summary`` (a record as a summary value),
``nonfinite_record`` (the non-finite watch's record), ``graph_record`` (the model's graph,
``ModelGraph``, and its record), ``framing`` (the framing of records in an event file),
``event_file``, ``event_objects`` and ``user_writer`` (writing event files: appended
locally, an object per flush, or through a user's SummaryWriter), ``event_reader`` (what
an event file is, and reading them, with ``tag_table``, ``fast_events`` and
``chunk_values``; ``event_scan`` is its compiled scanner, of ``event_wire``'s wire format,
and ``tag_intern`` names the tags it finds), ``nonfinite`` and ``graphs``
(the watch's records and the graphs read back from a logdir) and ``record_columns``
(records decoded, and the checks a record must pass; ``block_columns`` for the block
formats section); ``numba_loops`` holds the compiled loops, imported on first use.
"""
