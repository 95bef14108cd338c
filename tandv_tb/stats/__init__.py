"""The statistics engine: exponent histograms, scalar statistics and cast counts.

It turns tensors into ``TensorStats`` and those into the event-file format's
``NumericsRecord`` (``tandv_tb.event_files.record``); that format never imports the engine.
Which kernel reads a tensor, for its statistics and (torch) for the non-finite watch, is
decided in one place, ``_kernel_choice``, with its ``TANDV_TB_KERNEL`` switch:
``kernel_setting``, ``torch_kernel``, ``watch_kernel``, ``jax_kernel``.
"""

from tandv_tb.stats._kernel_choice import failed as kernel_failed
from tandv_tb.stats._kernel_choice import jax_kernel, torch_kernel, triton_watch, watch_kernel
from tandv_tb.stats._kernel_choice import setting as kernel_setting
from tandv_tb.stats.engine import Packed, Pending, Slot, compute, compute_many, fetch, tensor_stats
from tandv_tb.stats.tensor_stats import TensorStats

__all__ = [
    "Packed",
    "Pending",
    "Slot",
    "TensorStats",
    "compute",
    "compute_many",
    "fetch",
    "jax_kernel",
    "kernel_failed",
    "kernel_setting",
    "tensor_stats",
    "torch_kernel",
    "triton_watch",
    "watch_kernel",
]
