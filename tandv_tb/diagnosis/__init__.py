"""Diagnosis: what went wrong in a training, named by run, step, tensor and reason.

``tandv_tb.findings(logdir)`` (this package's ``findings``) reads every recorded step of the
runs under a logdir from the numerics store (``tandv_tb.store``) and returns one row
per finding; ``tandv-tb findings LOGDIR`` (``cli``) prints them; the plugin's ``findings``
route serves them to the Numerics tab. Kinds, one module per group:

- ``first_nonfinite``: ``nonfinite`` (error), the run's first NaN/Inf and its first tensor;
- ``low_precision``: ``overflow`` (error/warning), ``underflow`` (warning), ``scale`` (info)
  for the formats recorded at tracking time;
- ``trends``: ``drift`` (warning), ``dead`` (warning), ``loss_spike`` (info);
- ``divergence``: ``divergence`` (warning) between two runs.

The package is called ``diagnosis``, not ``findings``: a subpackage ``tandv_tb.findings``
would replace the function ``tandv_tb.findings`` by itself as soon as it was imported.
"""

from __future__ import annotations

import os

from tandv_tb.diagnosis.base import COLUMNS, SEVERITIES, Finding, Thresholds

__all__ = ["COLUMNS", "SEVERITIES", "Finding", "Thresholds", "findings", "find"]

_DEFAULTS = Thresholds()


def find(
    logdir: str | os.PathLike,
    *,
    run: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    thresholds: Thresholds = _DEFAULTS,
) -> list[Finding]:
    """The findings as ``Finding`` objects (what ``findings`` and the command line build
    on); ``logdir`` a path or any fsspec URL. ``FileNotFoundError`` for a missing logdir,
    ``ValueError`` for an unknown run, ``tandv_tb.disk.locations.StorageError`` for
    storage that cannot be read."""
    from tandv_tb.diagnosis.engine import diagnose
    from tandv_tb.disk.locations import public_url
    from tandv_tb.store import NumericsStore
    from tandv_tb.store.logdir import Logdir

    root = Logdir.of(logdir)
    if not root.exists():
        raise FileNotFoundError(f"no such log directory: {public_url(root.root)!r}")
    db = NumericsStore(root, cache_dir)
    try:
        runs = db.runs()
        if run is not None:
            if run not in runs:
                raise ValueError(f"no run {run!r} under {public_url(root.root)!r}; runs: {runs}")
            runs = [run]
        for name in runs:
            db.refresh(name)
        return diagnose(db, runs, thresholds)
    finally:
        db.close()


def findings(
    logdir: str | os.PathLike,
    *,
    run: str | None = None,
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
    recorded step: a ``pandas.DataFrame`` with one row per finding and the columns ``run``
    (str), ``step`` (int64), ``kind`` (str), ``severity`` (``"error"``, ``"warning"`` or
    ``"info"``), ``tensor_type`` (str, may be empty), ``name`` (str, may be empty),
    ``value`` (float64, may be NaN) and ``message`` (str), sorted by run, then step.

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
    rows = [f.row() for f in find(logdir, run=run, cache_dir=cache_dir, thresholds=thresholds)]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype(
        {
            "run": object,
            "step": "int64",
            "kind": object,
            "severity": object,
            "tensor_type": object,
            "name": object,
            "value": "float64",
            "message": object,
        }
    ).reset_index(drop=True)
