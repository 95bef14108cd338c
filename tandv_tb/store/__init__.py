"""The numerics store: every recorded step of the runs under a logdir, in DuckDB, for the
plugin and the findings. ``NumericsStore`` is its one entry; its modules, from the bottom
up (each imports only modules listed before it):

- ``schema``: the tables, written once; ``database``: where a logdir's database lives and
  opening it whatever state it was left in; ``run_ids``: a run's name to its id;
- ``logdir``: the runs under a logdir (a local folder, an fsspec URL, a ``--logdir_spec``)
  and their event files (listing, reading bytes; ``tandv_tb.filesystems.locations``);
- ``block_rows``: the block-scaled formats' rows of a chunk of records; ``ingest``: a run
  brought up to date with its files (its pieces read and decoded in the calling thread, or
  in ``reader_process``, a process of its own, where TensorBoard's Python loader holds the
  server's GIL); ``updates``: when (``refresh``, the background build);
- ``results``: a query's result as numpy columns, in (tag, step) order; ``rows``: records
  by (tag, step) and the one index over them; ``layout``: how stored rows are arranged
  (held between queries, never leaving the package); ``lru``; ``series``: what the routes
  get (``LayerSeries``, ``LayerGrid``, ``ScalarSeries``, ``Needs``);
- ``reader``: every read of the store; ``held``: columns kept between requests;
  ``assemble``: one tag's series out of the columns read for several tags;
- ``store``: ``NumericsStore``.
"""

from tandv_tb.store.store import NumericsStore

__all__ = ["NumericsStore"]
