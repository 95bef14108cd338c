"""tandv_tb: numerics of neural-network training in TensorBoard."""

__version__ = "0.1.0"
