"""TensorBoard plugin ``tandv``: the Numerics tab's backend.

TensorBoard finds it through the ``tensorboard_plugins`` entry point
``tandv = tandv_tb.plugin:NumericsLoader``; the routes are documented in ``http_api.md``.
"""

from tandv_tb.plugin.loader import DEFAULT_SAMPLES, NumericsLoader

__all__ = ["DEFAULT_SAMPLES", "NumericsLoader"]
