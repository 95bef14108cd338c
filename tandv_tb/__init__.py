"""tandv_tb: numerics of neural-network training in TensorBoard.

``tandv_tb.torch.track`` and ``tandv_tb.jax.track`` are the trackers (imported on demand,
so neither framework is needed for the other); ``tandv_tb.lightning`` and
``tandv_tb.transformers`` hold ``NumericsCallback`` for Lightning's and Hugging Face's
trainers (imported on demand too); ``NumericsWriter`` writes any tensor;
``read_frame``/``write_frame`` are the pandas interop; ``findings`` names what went wrong
(imported on first use: ``tandv_tb.diagnosis``).
"""

from tandv_tb.frame import (
    DataWarning,
    EstimateWarning,
    SchemaError,
    read_frame,
    to_tandv,
    validate,
    write_frame,
)
from tandv_tb.writer import NumericsWriter, WriteFailureWarning

__version__ = "0.1.0"

__all__ = [
    "DataWarning",
    "EstimateWarning",
    "findings",
    "NumericsWriter",
    "SchemaError",
    "read_frame",
    "to_tandv",
    "WriteFailureWarning",
    "validate",
    "write_frame",
]


def __getattr__(name: str):
    if name == "findings":  # the engine and its store (DuckDB) load only when used
        from tandv_tb.diagnosis import findings

        return findings
    raise AttributeError(f"module 'tandv_tb' has no attribute {name!r}")
