"""Diagnosis: what went wrong in a training, named by run, step, tensor and reason.

``tandv_tb.findings(logdir)`` (this package's ``findings``) reads every recorded step of the
runs under a logdir from the numerics store (``tandv_tb.store``) and returns the
findings, grouped (``grouping``: one run, kind, format and tensor type) or one row per
tensor; ``tandv-tb findings LOGDIR`` (``cli``) prints each run's headline (``headline``)
and the groups, those expected of the recorded formats folded into one line per run for its
element formats and one for its block formats (``folding``); the plugin's ``findings``
route serves them to the Numerics tab.
``analysis`` runs every kind, one module per group of kinds:

- ``first_nonfinite``: ``nonfinite`` (error), the run's first NaN/Inf and its first tensor;
- ``low_precision``: ``overflow`` (error/warning), ``underflow`` (warning), ``scale`` (info)
  for the formats recorded at tracking time;
- ``trends``: ``drift`` (warning), ``dead`` (warning), ``loss_spike`` (info);
- ``divergence``: ``divergence`` (warning) between two comparable runs (``comparable``).

Each module imports only modules below it (``tests/diagnosis/test_layers.py``): ``base``;
``run_numerics``; the kinds, ``comparable``, ``grouping`` and ``headline``; ``divergence``
and ``folding``; ``analysis``; this package; ``cli``.

The package is called ``diagnosis``, not ``findings``: a subpackage ``tandv_tb.findings``
would replace the function ``tandv_tb.findings`` by itself as soon as it was imported.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tandv_tb.diagnosis.base import COLUMNS, GROUP_COLUMNS, SEVERITIES, Finding, Thresholds

__all__ = ["COLUMNS", "GROUP_COLUMNS", "SEVERITIES", "Finding", "Thresholds", "findings", "find"]

if TYPE_CHECKING:
    from tandv_tb.diagnosis.analysis import Diagnosis

_DEFAULTS = Thresholds()


def find(
    logdir: str | os.PathLike,
    *,
    run: str | None = None,
    compare: tuple[str, str] | None = None,
    cache_dir: str | os.PathLike | None = None,
    thresholds: Thresholds = _DEFAULTS,
) -> Diagnosis:
    """The ``analysis.Diagnosis`` of the runs under ``logdir`` (a path or any fsspec URL; what
    ``findings`` and the command line build on): every run, or ``run``, or the two runs of
    ``compare`` compared whatever they share. ``FileNotFoundError`` for a missing logdir,
    ``ValueError`` for an unknown run or a bad pair, ``tandv_tb.filesystems.locations.StorageError``
    for storage that cannot be read."""
    from tandv_tb.diagnosis.analysis import diagnose
    from tandv_tb.filesystems.locations import public_url
    from tandv_tb.store import NumericsStore
    from tandv_tb.store.logdir import Logdir

    root = Logdir.of(logdir)
    if not root.exists():
        raise FileNotFoundError(f"no such log directory: {public_url(root.root)!r}")
    if run is not None and compare is not None:
        raise ValueError("give either run or compare, not both")
    if compare is not None and (len(compare) != 2 or compare[0] == compare[1]):
        raise ValueError(f"compare needs two different runs, got {compare!r}")
    db = NumericsStore(root, cache_dir)
    try:
        runs = db.runs()
        asked = [run] if run is not None else list(compare or runs)
        for name in asked:
            if name not in runs:
                where = public_url(root.root)
                raise ValueError(f"no run {name!r} under {where!r}; runs: {runs}")
            db.refresh(name)
        return diagnose(db, asked, thresholds, tuple(compare) if compare else None)
    finally:
        db.close()


def findings(
    logdir: str | os.PathLike,
    *,
    run: str | None = None,
    grouped: bool = True,
    compare: tuple[str, str] | None = None,
    cache_dir: str | os.PathLike | None = None,
    overflow_error: float = _DEFAULTS.overflow_error,
    overflow_warning: float = _DEFAULTS.overflow_warning,
    underflow_share: float = _DEFAULTS.underflow_share,
    underflow_window: int = _DEFAULTS.underflow_window,
    scale_steps: int = _DEFAULTS.scale_steps,
    drift_z: float = _DEFAULTS.drift_z,
    drift_min_binades: float = _DEFAULTS.drift_min_binades,
    drift_min_history: int = _DEFAULTS.drift_min_history,
    dead_window: int = _DEFAULTS.dead_window,
    loss_spike_z: float = _DEFAULTS.loss_spike_z,
    loss_spike_rise: float = _DEFAULTS.loss_spike_rise,
    loss_window: int = _DEFAULTS.loss_window,
    loss_link_steps: int = _DEFAULTS.loss_link_steps,
    divergence_metric: str = _DEFAULTS.divergence_metric,
    divergence_threshold: float = _DEFAULTS.divergence_threshold,
):
    """What went wrong in the runs under ``logdir`` (or in one ``run``), over every
    recorded step: a ``pandas.DataFrame`` sorted by run, then step, with the columns
    ``run`` (str), ``step`` (int64), ``kind`` (str), ``severity`` (``"error"``,
    ``"warning"`` or ``"info"``), ``tensor_type`` (str, may be empty), ``name`` (str, may
    be empty), ``value`` (float64, may be NaN) and ``message`` (str).

    ``grouped=True`` (the default): one row per condition that many tensors share (one
    run, kind, format and tensor type; ``tandv_tb.diagnosis.grouping`` gives the key of
    the kinds without a tensor type), its sentence giving the numbers, plus the column
    ``tensors`` (int64, how many tensors share it). ``grouped=False``: one row per tensor.
    Every group is a row (the command line's default output folds some, not this).
    ``divergence`` compares runs that share most of their tensors (same type, name and
    size); ``compare=(RUN_A, RUN_B)`` keeps those two runs and compares them whatever
    they share.

    The store of every recorded step is kept in ``cache_dir`` (default
    ``~/.cache/tandv_tb``) and only what is new is read. Each threshold is documented on
    ``tandv_tb.diagnosis.Thresholds`` (shares are fractions, jumps in binades).
    ``FileNotFoundError`` for a missing logdir, ``ValueError`` for an unknown run or a bad
    threshold.
    """
    import pandas as pd

    thresholds = Thresholds(
        overflow_error=overflow_error,
        overflow_warning=overflow_warning,
        underflow_share=underflow_share,
        underflow_window=underflow_window,
        scale_steps=scale_steps,
        drift_z=drift_z,
        drift_min_binades=drift_min_binades,
        drift_min_history=drift_min_history,
        dead_window=dead_window,
        loss_spike_z=loss_spike_z,
        loss_spike_rise=loss_spike_rise,
        loss_window=loss_window,
        loss_link_steps=loss_link_steps,
        divergence_metric=divergence_metric,
        divergence_threshold=divergence_threshold,
    )
    found = find(logdir, run=run, compare=compare, cache_dir=cache_dir, thresholds=thresholds)
    rows = [f.row() for f in (found.groups if grouped else found.findings)]
    columns = GROUP_COLUMNS if grouped else COLUMNS
    types = {
        "run": object,
        "step": "int64",
        "kind": object,
        "severity": object,
        "tensor_type": object,
        "name": object,
        "value": "float64",
        "message": object,
        "tensors": "int64",
    }
    frame = pd.DataFrame(rows, columns=list(columns))
    return frame.astype({c: types[c] for c in columns}).reset_index(drop=True)
