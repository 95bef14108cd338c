"""Numerics tracking for JAX/Flax training, also under ``jax.jit``: ``tandv_tb.jax.track``."""

# First: jax below the floor stops here with an ImportError naming both versions.
from tandv_tb.jax import features  # noqa: F401
from tandv_tb.jax.attaching import attach
from tandv_tb.jax.skips import UntrackableArrayWarning
from tandv_tb.jax.tracker import Tracker, track

__all__ = ["Tracker", "UntrackableArrayWarning", "attach", "track"]
