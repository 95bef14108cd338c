"""tandv_tb: numerics of neural-network training in TensorBoard.

``tandv_tb.torch.track`` and ``tandv_tb.jax.track`` are the trackers (imported on demand,
so neither framework is needed for the other); ``tandv_tb.lightning`` and
``tandv_tb.transformers`` hold ``NumericsCallback`` for Lightning's and Hugging Face's
trainers (imported on demand too); ``NumericsWriter`` writes any tensor;
``read_frame``/``write_frame`` are the pandas interop; ``findings`` names what went wrong
(imported on first use: ``tandv_tb.diagnosis``).
"""

import importlib

#: Public names, each from the module that defines it, imported on first use: the command
#: line (``tandv-tb findings``) starts without pandas or the writers.
_LAZY = {
    "DataWarning": "tandv_tb.frame",
    "EstimateWarning": "tandv_tb.frame",
    "SchemaError": "tandv_tb.frame",
    "read_frame": "tandv_tb.frame",
    "to_tandv": "tandv_tb.frame",
    "validate": "tandv_tb.frame",
    "write_frame": "tandv_tb.frame",
    "NumericsWriter": "tandv_tb.writer",
    "WriteFailureWarning": "tandv_tb.writer",
    "findings": "tandv_tb.diagnosis",  # the engine and its store (DuckDB)
}

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
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tandv_tb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
