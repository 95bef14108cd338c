"""What the installed torch offers the tracker, found once, where ``tandv_tb.torch`` is
imported (its first import: the floor is checked before any other module of the package
touches torch).

- **The floor**: torch older than ``versions.FLOORS["torch"]`` raises an ``ImportError``
  naming both versions (``versions.require``).
- **Ordered custom-op effects** (``register_ordered_effect``): the compiled graphs'
  operator ``tandv_tb::observe`` returns nothing, so inductor would drop it unless it is
  registered as an ordered effect (``CustomOpDef.register_effect``, which torch 2.8 and
  older lack). Found by feature detection.
- **Tracking inside ``torch.compile``** (``hooks_in_graph``): needs that effect, and a
  dynamo that traces the tracker's hooks, ``attach`` and the gradient hand-over into the
  model's graph with no graph break. Measured (docs/support.md): torch 2.11's dynamo stops
  on them with an internal error; 2.12.0 passes tests/trackers/torch/test_torch_compile*.py
  and test_graph_capture*.py with them in the graph. No attribute tells the two apart, so
  this one compares versions (``packaging.version``). Below it,
  compiled code hands nothing over: the compiled modules' activations and gradients are
  not recorded, everything else is, and ``compiled_tracking_lacking`` says so once.
"""

from __future__ import annotations

import torch
from packaging.version import Version

from tandv_tb.versions import lacking, require

require("torch")

#: The first torch release whose dynamo traces the tracker into compiled graphs.
COMPILED_TRACKING = "2.12"


def register_ordered_effect(operator: object) -> bool:
    """Register ``operator`` (a ``torch.library.custom_op``) as an ordered effect, so that
    inductor keeps it, in program order, though nothing reads what it returns; whether this
    torch can."""
    register = getattr(operator, "register_effect", None)
    effect_type = getattr(torch.library, "EffectType", None)
    if register is None or effect_type is None:
        return False
    register(effect_type.ORDERED)
    return True


def hooks_in_graph(ordered_effect: bool) -> bool:
    """Whether dynamo traces the tracker's hooks into compiled graphs (see the module)."""
    release = Version(torch.__version__).release
    return ordered_effect and release >= Version(COMPILED_TRACKING).release


def compiled_tracking_lacking() -> None:
    """Say, once, what a compiled model's tracking lacks on this torch."""
    lacking(
        f"recording the activations and gradients of modules under torch.compile "
        f"(torch {torch.__version__} is installed)",
        f"torch {COMPILED_TRACKING}",
        "compiled modules hand nothing over: their activations and gradients are not "
        "recorded; the weights, their gradients and the optimizer state are, and training "
        "is unchanged",
    )
