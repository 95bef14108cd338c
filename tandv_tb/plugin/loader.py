"""How TensorBoard finds and loads the plugin (the ``tensorboard_plugins`` entry point)."""

from __future__ import annotations

from tensorboard.plugins import base_plugin

from tandv_tb.event_files import metadata

#: Steps of each numerics tag that TensorBoard keeps unless the user says otherwise: the
#: plugin reads every step, runs and tags from its own store (``tandv_tb.store``);
#: TensorBoard's copy lists a run the store has not read yet and tells a fresh start that
#: the tab is active (its reservoir always keeps a tag's latest step).
DEFAULT_SAMPLES = 1


class NumericsLoader(base_plugin.TBLoader):
    """Loads ``NumericsPlugin``; raises TensorBoard's sampling default for numerics."""

    def define_flags(self, parser) -> None:
        parser.add_argument(
            "--tandv_cache_dir",
            metavar="PATH",
            default=None,
            help="Folder of the Numerics tab's store of every recorded step, one per logdir "
            "(default: $XDG_CACHE_HOME/tandv_tb, i.e. ~/.cache/tandv_tb). Safe to delete.",
        )

    def fix_flags(self, flags) -> None:
        """Keep ``DEFAULT_SAMPLES`` steps per numerics tag in TensorBoard unless
        ``--samples_per_plugin`` names ``tandv`` itself (a user's flag wins)."""
        samples = getattr(flags, "samples_per_plugin", None)
        if isinstance(samples, dict):
            samples.setdefault(metadata.PLUGIN_NAME, DEFAULT_SAMPLES)

    def load(self, context: base_plugin.TBContext):
        from tandv_tb.plugin.plugin import NumericsPlugin

        return NumericsPlugin(context)
