"""``tandv_tb.torch.track``'s options, checked once."""

from __future__ import annotations

import dataclasses

import torch

from tandv_tb.stats import kernel_setting
from tandv_tb.tracking.options import TrackOptions


@dataclasses.dataclass(frozen=True)
class TorchOptions(TrackOptions):
    """``tandv_tb.torch.track``'s options: those of ``TrackOptions`` and PyTorch's own."""

    optimizer: torch.optim.Optimizer | None
    track_activations: bool
    track_weights: bool
    track_optimizer: bool
    only_training: bool
    per_rank: bool
    process_group: object
    layouts: object
    mesh: object

    def __post_init__(self) -> None:
        optimizer = self.optimizer
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        kernel_setting()  # TANDV_TB_KERNEL: a ValueError naming the kernels, before any hook
        super().__post_init__()
