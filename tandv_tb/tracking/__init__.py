"""What both trackers (``tandv_tb.torch``, ``tandv_tb.jax``) share, below them and above the
writer, from the bottom up:

- ``selection``: which names are tracked (``include``/``exclude``); ``skip_log``: one warning
  per tensor a tracker cannot track; ``leaf_names``: the one rule naming the tensors of a
  module's output or inputs;
- ``options``: ``TrackOptions``, the options both ``track`` functions take, checked once,
  and the default logdir;
- ``orders``: the one execution order of the tracked tensors; ``step_buffer``: one tracked
  step's statistics, fetched in one transfer and merged per tracked tensor (``Entry``);
  ``processes``: how a tracker's processes share a step (alone, or PyTorch's ranks);
- ``nonfinite_policy``: a step's report and what ``on_nonfinite`` does with it;
- ``tracker_base``: the life of a tracker (its steps and their cadence, its writer, the one
  way a tracked step ends and is written, the stop before the update, ``flush``,
  ``close``);
- ``graph_builder``: the model's graph built as its calls run (``CallGraph``), and the one
  warning a failed recording gives.
"""
