"""The statistics engine: exponent histograms, scalar statistics and cast counts.

It turns tensors into ``TensorStats`` and those into the disk format's ``NumericsRecord``
(``tandv_tb.disk.record``); the disk format never imports the engine.
"""

from tandv_tb.stats.engine import Pending, compute, fetch, tensor_stats
from tandv_tb.stats.tensor_stats import TensorStats

__all__ = ["Pending", "TensorStats", "compute", "fetch", "tensor_stats"]
