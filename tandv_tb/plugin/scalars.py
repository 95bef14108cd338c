"""TensorBoard's scalars (the loss line beside the numerics).

They come from the plugin's store, every stored step (the findings' ``loss_spike`` reads
the same rows, so the line holds every step a finding names); TensorBoard's own memory
keeps a sample of them (1,000 per tag by default). Without a store (no logdir) they come
from TensorBoard's data provider, as many as it holds. Which runs have scalars is
TensorBoard's listing either way: a listing needs no step, and it knows runs the store has
not read yet.
"""

from __future__ import annotations

import numpy as np
from tensorboard.data import provider as tb_provider
from tensorboard.errors import NotFoundError

from tandv_tb.store import NumericsStore
from tandv_tb.store.series import ScalarSeries

SCALARS_PLUGIN = "scalars"
#: Ask the provider for every scalar step it holds.
ALL_SAMPLES = 1 << 40


class Scalars:
    def __init__(self, store: NumericsStore | None, provider: tb_provider.DataProvider):
        self._store = store
        self._provider = provider

    def runs(self, ctx, experiment_id: str) -> list[str]:
        """The runs that have scalars."""
        listing = self._provider.list_scalars(
            ctx, experiment_id=experiment_id, plugin_name=SCALARS_PLUGIN
        )
        return sorted(run for run, tags in listing.items() if tags)

    def read(
        self, ctx, experiment_id: str, run: str, tags: list[str] | None
    ) -> dict[str, ScalarSeries]:
        """``{tag: ScalarSeries}`` of one run, by tag (every tag when ``tags`` is None);
        404 for an unknown tag."""
        if self._store is not None:
            found = self._store.scalar_series(run, tags)
        else:
            found = self._from_provider(ctx, experiment_id, run, tags)
        for tag in tags or ():
            if tag not in found:
                raise NotFoundError(f"run {run!r} has no scalar tag {tag!r}")
        return found

    def _from_provider(
        self, ctx, experiment_id: str, run: str, tags: list[str] | None
    ) -> dict[str, ScalarSeries]:
        listing = self._provider.list_scalars(
            ctx,
            experiment_id=experiment_id,
            plugin_name=SCALARS_PLUGIN,
            run_tag_filter=tb_provider.RunTagFilter(runs=[run]),
        ).get(run, {})
        wanted = sorted(tag for tag in (tags or listing) if tag in listing)
        if not wanted:
            return {}
        data = self._provider.read_scalars(
            ctx,
            experiment_id=experiment_id,
            plugin_name=SCALARS_PLUGIN,
            downsample=ALL_SAMPLES,
            run_tag_filter=tb_provider.RunTagFilter(runs=[run], tags=wanted),
        ).get(run, {})
        return {
            tag: ScalarSeries(
                np.array([d.step for d in data.get(tag, [])], dtype=np.int64),
                np.array([d.wall_time for d in data.get(tag, [])], dtype=np.float64),
                np.array([d.value for d in data.get(tag, [])], dtype=np.float64),
            )
            for tag in wanted
        }
