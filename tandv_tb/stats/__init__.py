"""The statistics engine: exponent histograms, scalar statistics and cast counts."""

from tandv_tb.disk.record import COUNTS, STATISTICS, NumericsRecord, TensorStats
from tandv_tb.stats.engine import Pending, compute, fetch, tensor_stats

__all__ = [
    "COUNTS",
    "STATISTICS",
    "NumericsRecord",
    "Pending",
    "TensorStats",
    "compute",
    "fetch",
    "tensor_stats",
]
