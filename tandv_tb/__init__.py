"""tandv_tb: numerics of neural-network training in TensorBoard.

``tandv_tb.torch.track`` and ``tandv_tb.jax.track`` are the trackers (imported on demand,
so neither framework is needed for the other); ``tandv_tb.lightning`` and
``tandv_tb.transformers`` hold ``NumericsCallback`` for Lightning's and Hugging Face's
trainers (imported on demand too); ``NumericsWriter`` writes any tensor;
``read_frame``/``write_frame`` are the pandas interop.
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
    "NumericsWriter",
    "SchemaError",
    "read_frame",
    "to_tandv",
    "WriteFailureWarning",
    "validate",
    "write_frame",
]
