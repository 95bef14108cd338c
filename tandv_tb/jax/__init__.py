"""Numerics tracking for JAX/Flax training, also under ``jax.jit``: ``tandv_tb.jax.track``."""

from tandv_tb.jax.attaching import attach
from tandv_tb.jax.skips import UntrackableArrayWarning
from tandv_tb.jax.tracker import Tracker, track

__all__ = ["Tracker", "UntrackableArrayWarning", "attach", "track"]
