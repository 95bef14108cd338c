"""How TensorBoard finds and loads the plugin (the ``tensorboard_plugins`` entry point)."""

from __future__ import annotations

from tensorboard.plugins import base_plugin

from tandv_tb import metadata

#: Steps of each numerics tag that TensorBoard keeps unless the user says otherwise
#: (TensorBoard keeps only 10 or 100 of a third-party plugin's tensors by default).
DEFAULT_SAMPLES = 1000


class NumericsLoader(base_plugin.TBLoader):
    """Loads ``NumericsPlugin``; raises TensorBoard's sampling default for numerics."""

    def fix_flags(self, flags) -> None:
        """Keep ``DEFAULT_SAMPLES`` steps per numerics tag unless ``--samples_per_plugin``
        names ``tandv`` itself (a user's flag wins)."""
        samples = getattr(flags, "samples_per_plugin", None)
        if isinstance(samples, dict):
            samples.setdefault(metadata.PLUGIN_NAME, DEFAULT_SAMPLES)

    def load(self, context: base_plugin.TBContext):
        from tandv_tb.plugin.plugin import NumericsPlugin

        return NumericsPlugin(context)
