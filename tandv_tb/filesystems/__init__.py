"""Where event files live, apart from what they hold (``tandv_tb.event_files``): the bottom
layer, importing nothing else of tandv_tb.

- ``locations``: a logdir as a ``Location``, a local folder (read with the operating
  system) or any URL fsspec opens (``s3://``, ``gs://``, ...): its runs and their files
  (listing), a file's bytes read by range, storage errors as one sentence
  (``StorageError``), and the one local-or-remote rule (``is_local``, ``location``);
- ``ranges``: a file's bytes read by range (``ByteSource``, ``LocalBytes``), ranges
  gathered from a buffer, and the indices of ragged ranges; ``numba_loops`` holds the
  compiled gather, loaded on first use.

Writing event files is the event-file format's (``tandv_tb.event_files.event_file`` appends
to a local one, ``tandv_tb.event_files.event_objects`` writes an object per flush through
``filesystem``): what they write is framed events, and this package knows bytes only.
"""
