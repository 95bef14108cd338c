"""Numerics tracking for PyTorch training: ``tandv_tb.torch.track``.

Modules: ``tracker`` (``track``, the step cycle), ``options`` (``track``'s options,
checked), ``hooks`` (module outputs and their gradients), ``inputs`` (module inputs and
their gradients), ``attaching`` (any tensor in a forward), ``compiled`` (what
``torch.compile`` needs: the operator the hooks put into its graphs, the rule for what a
step does with a tensor, when compiled code is dropped), ``parameters`` (weights, weight
gradients, optimizer state), ``recorder`` (statistics started on the tensor's device),
``memo`` (a tensor seen twice in a step), ``ranks`` (the distributed side of a tracker:
how tensors lie over the ranks, ``parallel_layout``; combining them, ``distributed``;
per-rank runs, ``rank_runs``), ``pipeline_stage`` (a pipeline stage tracked as part of
the whole model), ``watch`` (NaN/Inf on every step; ``device_watch``: the Triton watch's
counters on a device), ``graph_capture`` (the model's graph: when, and from which
forward; ``graph_recording`` builds it from hooks, ``graph_replay`` for compiled
models), ``naming`` and ``skips``. What the JAX tracker shares is in
``tandv_tb.tracking``.
"""

# First: torch below the floor stops here with an ImportError naming both versions.
from tandv_tb.torch import features  # noqa: F401
from tandv_tb.torch.attaching import attach
from tandv_tb.torch.compiled import CompiledBeforeTrackWarning
from tandv_tb.torch.skips import UntrackableTensorWarning
from tandv_tb.torch.tracker import Tracker, is_tracked, track

__all__ = [
    "CompiledBeforeTrackWarning",
    "Tracker",
    "UntrackableTensorWarning",
    "attach",
    "is_tracked",
    "track",
]
