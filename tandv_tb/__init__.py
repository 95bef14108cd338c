"""tandv_tb: numerics of neural-network training in TensorBoard.

``tandv_tb.torch.track`` and ``tandv_tb.jax.track`` are the trackers (imported on demand,
so neither framework is needed for the other); ``tandv_tb.lightning`` and
``tandv_tb.transformers`` hold ``NumericsCallback`` for Lightning's and Hugging Face's
trainers (imported on demand too); ``NumericsWriter`` writes any tensor;
``read_frame``/``write_frame`` are the pandas interop; ``findings`` names what went wrong
(imported on first use: ``tandv_tb.diagnosis``). Every public name is imported on first
use (``_EXPORTS``).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and editors see; at run time, ``__getattr__``
    from tandv_tb.diagnosis import findings
    from tandv_tb.frame import (
        DataWarning,
        EstimateWarning,
        SchemaError,
        read_frame,
        to_tandv,
        validate,
        write_frame,
    )
    from tandv_tb.tracking.graph_builder import GraphCaptureWarning
    from tandv_tb.tracking.nonfinite_policy import NonFiniteError, NonFiniteWarning, StepReport
    from tandv_tb.writer import NumericsWriter, WriteFailureWarning

__version__ = "0.1.0"

__all__ = [
    "DataWarning",
    "EstimateWarning",
    "findings",
    "GraphCaptureWarning",
    "NonFiniteError",
    "NonFiniteWarning",
    "NumericsWriter",
    "SchemaError",
    "StepReport",
    "read_frame",
    "to_tandv",
    "WriteFailureWarning",
    "validate",
    "write_frame",
]


#: Where each public name lives; imported on first use, so that ``import tandv_tb`` (and
#: TensorBoard's plugin process, which imports ``tandv_tb.plugin``) loads neither pandas,
#: numba nor a framework until a name that needs them is used.
_EXPORTS = {
    "DataWarning": "tandv_tb.frame",
    "EstimateWarning": "tandv_tb.frame",
    "findings": "tandv_tb.diagnosis",
    "GraphCaptureWarning": "tandv_tb.tracking.graph_builder",
    "NonFiniteError": "tandv_tb.tracking.nonfinite_policy",
    "NonFiniteWarning": "tandv_tb.tracking.nonfinite_policy",
    "StepReport": "tandv_tb.tracking.nonfinite_policy",
    "NumericsWriter": "tandv_tb.writer",
    "SchemaError": "tandv_tb.frame",
    "read_frame": "tandv_tb.frame",
    "to_tandv": "tandv_tb.frame",
    "WriteFailureWarning": "tandv_tb.writer",
    "validate": "tandv_tb.frame",
    "write_frame": "tandv_tb.frame",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tandv_tb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access skips __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
