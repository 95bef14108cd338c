"""A pipeline stage (``torch.distributed.pipelining``) tracked as a part of the whole model.

Each rank tracks its stage (``track(stage)``): the stage's module keeps the names of the
model it was cut from (a manual split that keeps the modules' paths, or ``pipeline()``'s
split, which keeps them for every module called once), so records are named as on one
process, and the ranks' records merge on the writing rank as any other rank's do. What
the stage adds:

- the stage's root module output is the model's output only on the last stage (on the
  others it is an intermediate tensor, recorded as the output of the layer that made it),
  and the root's input the model's input only on the first;
- its tensors are ordered after the earlier stages' (``RankCombiner``'s ``position``);
- the schedule calls the stage once per microbatch: the tracker merges a module's calls
  in a step into one record, as for any module called several times;
- a ``PipelineStage`` given no ``input_args`` infers the shapes it sends at its first
  step, by running its module forward (and backward) on stand-in tensors (a copy of the
  first microbatch, or uninitialised memory): those calls are not the training's, and
  are neither recorded nor watched (``Stage.inferring``).
"""

from __future__ import annotations

import dataclasses

from torch import nn


@dataclasses.dataclass(frozen=True)
class Stage:
    """Where a stage sits in the pipeline."""

    position: int = 0
    first: bool = True
    last: bool = True
    pipeline_stage: object = dataclasses.field(default=None, compare=False, repr=False)

    def inferring(self) -> bool:
        """Whether the stage runs its module to infer its shapes: until then it lacks the
        metadata of its inputs and outputs (private ``_stage_meta``, pinned by
        tests/project/test_private_api_pins.py)."""
        meta = getattr(self.pipeline_stage, "_stage_meta", None)
        return meta is not None and not meta.is_complete_for_forward()


#: A model tracked whole, on one rank or on each.
WHOLE_MODEL = Stage()


def stage_of(tracked: object) -> tuple[object, Stage]:
    """The module to hook and its place in the pipeline: a ``PipelineStage`` (from
    ``PipelineStage(...)`` or ``pipe.build_stage``) gives its module; any other module is
    the whole model."""
    submodule = getattr(tracked, "submod", None)
    if isinstance(submodule, nn.Module) and hasattr(tracked, "stage_index"):
        position, first, last = tracked.stage_index, tracked.is_first, tracked.is_last
        return submodule, Stage(position, first, last, tracked)
    return tracked, WHOLE_MODEL
