"""The ``tandv`` TensorBoard plugin: the Numerics tab's routes over the plugin's own store.

The store reads what TensorBoard reads: ``--logdir`` (a local folder or any fsspec URL) or
every logdir of ``--logdir_spec`` (``tandv_tb.store.logdir``). Storage that cannot be read
(denied, missing, unreachable) is answered as a JSON error naming the logdir and the
reason (403, 404, 503; ``STORAGE_STATUS``), never a 500; the tab shows it. So is a logdir
whose filesystem cannot be made (no fsspec package for its protocol, a filesystem that
refuses its options): the plugin loads all the same, to say so. A store that could be
written nowhere (``database.StoreUnwritable``) is answered 503 too; one kept in a
temporary place is said once in the ``runs`` route's ``notices``.

A request reads what is new in the event files of the runs it reads once, first
(``NumericsStore.refresh``); everything after reads the store as of then. Run routes are
built on one worker thread (``worker``) and kept while their runs are unchanged
(``response_cache``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tensorboard import context as tb_context
from tensorboard import errors as tb_errors
from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tandv_tb.event_files import metadata
from tandv_tb.filesystems.locations import StorageError
from tandv_tb.plugin import block_routes, csv_routes, findings_routes, graph_routes, numerics_routes
from tandv_tb.plugin.listing import Listing, provider_tags, store_tags
from tandv_tb.plugin.params import Params
from tandv_tb.plugin.response_cache import ResponseCache
from tandv_tb.plugin.responses import (
    JSON_TYPE,
    csv_response,
    dumps,
    error_response,
    public_details,
    uncompressed_json_response,
)
from tandv_tb.plugin.scalars import Scalars
from tandv_tb.plugin.static_files import static_file
from tandv_tb.plugin.worker import ResponseWorker
from tandv_tb.store import NumericsStore
from tandv_tb.store.logdir import Logdir

logger = logging.getLogger(__name__)

#: Routes that read one run's numerics: name -> payload builder.
RUN_ROUTES = {
    "layers": numerics_routes.layers,
    "steps": numerics_routes.steps,
    "histogram": numerics_routes.histogram,
    "heatmap": numerics_routes.heatmap,
    "series": numerics_routes.series,
    "blocks": block_routes.blocks,
    "graph": graph_routes.graph,
}
#: Routes without a run (or, for scalars, not bound to the numerics of a run).
PLAIN_ROUTES = {
    "runs": numerics_routes.runs,
    "formats": numerics_routes.formats_listing,
    "metrics": numerics_routes.metrics_listing,
    "scalars": numerics_routes.scalars,
}
CSV_ROUTES = {
    "layers.csv": ("layers", csv_routes.layers_csv),
    "histogram.csv": ("histogram", csv_routes.histogram_csv),
    "heatmap.csv": ("heatmap", csv_routes.heatmap_csv),
    "series.csv": ("series", csv_routes.series_csv),
    "blocks.csv": ("blocks", csv_routes.blocks_csv),
    "scalars.csv": ("scalars", csv_routes.scalars_csv),
}
#: The route over several runs (cached while none of them changes).
FINDINGS_ROUTE = "findings"
#: JSON routes whose body is mostly base64 (``responses.Matrix``): sent without gzip.
UNCOMPRESSED_ROUTES = {"heatmap"}
ES_MODULE_PATH = "/static/index.js"
#: The status of a route whose logdir's storage failed, by ``StorageError.kind``.
#: ``cache``: the plugin's own store could be written nowhere (``database.StoreUnwritable``).
STORAGE_STATUS = {"denied": 403, "missing": 404, "unreachable": 503, "failed": 503, "cache": 503}


class NumericsPlugin(base_plugin.TBPlugin):
    """Serves exponent histograms, heatmaps and series of tandv_tb numerics."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        cache_dir = getattr(context.flags, "tandv_cache_dir", None) if context.flags else None
        self._provider = context.data_provider
        self._store: NumericsStore | None = None
        self._unavailable: StorageError | None = None  # why there is no store, if it failed
        self._last_storage_error = ""  # the last one written to TensorBoard's log
        try:
            logdir = _logdir(context) if self._provider else None
            if logdir is not None:
                self._store = NumericsStore(
                    logdir, cache_dir, reader_process=_loads_here(self._provider)
                )
        except StorageError as error:  # no fsspec package for the URL, a refusing filesystem
            text = f"{error}; restart TensorBoard after mending it"
            self._unavailable = StorageError(text, error.kind)
            self._last_storage_error = text
            logger.warning("tandv_tb: %s", text)
        self._listing = Listing(
            store_tags(self._store, self._provider)
            if self._store is not None
            else provider_tags(self._provider)
        )
        self._scalars = Scalars(self._store, self._provider)
        self._responses = ResponseCache()
        self._worker = ResponseWorker()
        if self._store is not None:
            self._store.build_in_background()

    def get_plugin_apps(self) -> dict[str, Callable]:
        apps = {
            f"/{name}": self._app(self._answer, name) for name in {**RUN_ROUTES, **PLAIN_ROUTES}
        }
        apps[f"/{FINDINGS_ROUTE}"] = self._app(self._answer, FINDINGS_ROUTE)
        apps.update({f"/{name}": self._app(self._answer, name) for name in CSV_ROUTES})
        apps["/static/*"] = self._app(self._static, "static")
        apps["/*"] = self._app(self._unknown, "unknown")
        return apps

    def is_active(self) -> bool:
        """Whether any run holds numerics (TensorBoard asks only when its own plugin listing
        did not already show ``tandv`` data), without reading event files where it can:
        the store already holds tags (a restart), or TensorBoard lists numerics tags. Where
        the logdir's storage failed, the tab is active too: it says why."""
        if self._provider is None:
            return False
        if self._unavailable is not None:
            return True
        if self._store is not None and (
            self._store.has_numerics() or self._store.storage_failure is not None
        ):
            return True
        listing = provider_tags(self._provider)(tb_context.RequestContext(), "", None)
        return any(listing.values())

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path=ES_MODULE_PATH, tab_name="Numerics")

    # -- request handling ------------------------------------------------------------------
    def _app(self, handler: Callable, route: str) -> Callable:
        @wrappers.Request.application
        def app(request: wrappers.Request):
            if request.method not in ("GET", "HEAD"):
                return error_response(request, f"method {request.method} not allowed", 405)
            try:
                return handler(request, route)
            except tb_errors.PublicError as error:  # 400 and 404 (InvalidArgument, NotFound)
                return error_response(request, public_details(error), error.http_code)
            except StorageError as error:  # the logdir's storage: its message, never a 500
                if str(error) != self._last_storage_error:  # once in TensorBoard's log
                    self._last_storage_error = str(error)
                    logger.warning("tandv_tb: %s", error)
                code = STORAGE_STATUS.get(error.kind, 503)
                return error_response(request, str(error), code, storage=error.kind)
            except Exception:
                logger.exception("tandv plugin: internal error on %s", request.full_path)
                return error_response(request, "internal error (see TensorBoard's log)", 500)

        return app

    def _answer(self, request: wrappers.Request, route: str):
        if self._provider is None:
            raise tb_errors.NotFoundError("TensorBoard runs without a data provider")
        if self._unavailable is not None and route not in ("formats", "metrics"):
            raise self._unavailable  # every other route reads the logdir
        json_route, to_csv = CSV_ROUTES.get(route, (route, None))
        params = Params(request.args)
        query = numerics_routes.Query(
            self._listing,
            self._store,
            self._scalars,
            plugin_util.context(request.environ),
            plugin_util.experiment_id(request.environ),
            params,
        )
        runs = self._runs_read(json_route, params)
        if self._store is not None:
            for run in runs:  # once, before anything of theirs is listed or read
                self._store.refresh(run)
        if json_route == FINDINGS_ROUTE:
            body = self._findings(query, runs)
        elif json_route in RUN_ROUTES:
            key = (query.experiment_id, route, tuple(sorted(request.args.items(multi=True))))
            body = self._run_route(query, json_route, to_csv, runs, key)
        else:
            payload = PLAIN_ROUTES[json_route](query)
            body = to_csv(payload) if to_csv else dumps(payload)
        if to_csv is None and route in UNCOMPRESSED_ROUTES:
            return uncompressed_json_response(body)
        if to_csv is None:
            return http_util.Respond(request, body, JSON_TYPE)
        return csv_response(request, body, route.replace(".csv", "") + ".csv")

    def _runs_read(self, json_route: str, params: Params) -> list[str]:
        """The runs a request reads, as named (a name that is no run reads nothing): what
        is new in their files is read once per request."""
        if json_route == FINDINGS_ROUTE:
            return findings_routes.runs_of(params)
        if json_route in RUN_ROUTES:
            other = params.text("minus_run", required=False)
            return [params.text("run"), *([] if other is None else [other])]
        if json_route == "scalars":
            return [params.text("run")]
        if json_route == "runs" and self._store is not None:  # those listed from the store
            read = self._store.runs_read()
            return [run for run in self._store.runs() if run in read]
        return []

    def _findings(self, query: numerics_routes.Query, runs: list[str]) -> str:
        """The findings of ``runs``, kept while none of them changes."""
        findings_routes.check_runs(query, runs)
        store = query.numerics()
        fingerprint = tuple(store.version(run) for run in runs)
        key = (query.experiment_id, FINDINGS_ROUTE, tuple(runs))
        return self._responses.get(
            key, fingerprint, lambda: dumps(findings_routes.findings(query, runs))
        )

    def _run_route(
        self,
        query: numerics_routes.Query,
        json_route: str,
        to_csv: Callable[[dict], str] | None,
        runs: list[str],
        key: tuple,
    ) -> str:
        """A run route's body (``runs``: the run, and the ``minus_run`` of a difference),
        built on the worker thread and kept while its runs are unchanged."""
        indexes = [query.run(run) for run in runs]
        store = query.numerics()
        fingerprint = tuple((store.version(i.run), len(i.entries), i.skipped) for i in indexes)

        def build() -> str:
            payload = RUN_ROUTES[json_route](query, indexes[0])
            return to_csv(payload) if to_csv else dumps(payload)

        return self._worker.run(lambda: self._responses.get(key, fingerprint, build))

    def _static(self, request: wrappers.Request, route: str):
        relative = request.path.split("/static/", 1)[1] if "/static/" in request.path else ""
        content, content_type = static_file(relative)
        return http_util.Respond(request, content, content_type)

    def _unknown(self, request: wrappers.Request, route: str):
        raise tb_errors.NotFoundError(f"no route {request.path!r}; see tandv_tb/plugin/http_api.md")


def _loads_here(provider) -> bool:
    """Whether TensorBoard reads the event files with its Python loader, in this process
    (a remote logdir, ``--load_fast=false``): the store then reads in a process of its own
    (``tandv_tb.store.reader_process``), not beside it."""
    return isinstance(provider, MultiplexerDataProvider)


def _logdir(context: base_plugin.TBContext) -> Logdir | None:
    """What TensorBoard reads: ``--logdir`` (a path or URL), else ``--logdir_spec``."""
    if context.logdir:
        return Logdir.of(context.logdir)
    spec = getattr(context.flags, "logdir_spec", None) if context.flags else None
    return Logdir.from_spec(spec) if spec else None
