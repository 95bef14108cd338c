"""Helpers for the plugin tests: hand-made records, logdirs and TensorBoard apps over them."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import importlib.metadata
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from tensorboard import context as tb_context
from tensorboard import default as tb_default
from tensorboard import program
from tensorboard.backend import application
from tensorboard.backend.event_processing import (
    data_ingester,
    data_provider,
    plugin_event_multiplexer,
)
from tensorboard.data import server_ingester
from tensorboard.plugins import base_plugin
from werkzeug.datastructures import MultiDict
from werkzeug.test import Client

from tandv_tb import formats as fmt
from tandv_tb.event_files.record import STATISTICS, NumericsRecord
from tandv_tb.plugin import NumericsLoader, numerics_routes
from tandv_tb.plugin.listing import Listing, store_tags
from tandv_tb.plugin.params import Params
from tandv_tb.plugin.plugin import NumericsPlugin
from tandv_tb.plugin.scalars import Scalars
from tandv_tb.store import NumericsStore
from tandv_tb.writer import NumericsWriter

PREFIX = "/data/plugin/tandv/"


def make_record(
    rng: np.random.Generator, dtype: str, formats: tuple[str, ...] = (), kind: str = "normal"
) -> NumericsRecord:
    """A self-consistent record: ``kind`` is normal, empty (no value) or nonfinite."""
    info = fmt.info(dtype)
    specials = {"zero_count": 0, "nan_count": 0, "posinf_count": 0, "neginf_count": 0}
    if kind == "empty":
        counts, lo = np.zeros(0, dtype=np.int64), 0
    else:
        width = int(rng.integers(1, min(30, info.n_bins) + 1))
        center = int(rng.integers(-12, 4))
        lo = int(np.clip(center - width // 2, info.min_exponent, info.max_exponent - width + 1))
        counts = rng.integers(0, 500, size=width).astype(np.int64)
        counts[0], counts[-1] = counts[0] + 1, counts[-1] + 1
        specials["zero_count"] = int(rng.integers(0, 20))
    if kind == "nonfinite":
        specials.update(nan_count=3, posinf_count=2, neginf_count=1)
    numel = int(counts.sum()) + sum(specials.values())
    if counts.size:
        top = 2.0 ** (lo + len(counts)) * 0.75
        statistics = {
            "mean": float(rng.normal()) * top / 10,
            "std": top / 3,
            "mean_abs": top / 4,
            "max_abs": top,
            "min_abs": 0.0 if specials["zero_count"] else 2.0**lo,
            "min_abs_nonzero": 2.0**lo,
            "rm2": top / 3,
            "rm4": top / 2,
            "rm8": top / 1.5,
        }
    else:
        statistics = dict.fromkeys(STATISTICS, math.nan)
    casts = {f: int(rng.integers(0, max(1, numel // 10))) for f in formats}
    return NumericsRecord(
        dtype=dtype,
        numel=numel,
        **specials,
        bins_lo=lo if counts.size else 0,
        counts=counts,
        statistics=statistics,
        underflow=dict(casts),
        overflow={f: max(0, c - 1) for f, c in casts.items()},
    )


def heatmap_values(body: dict) -> list[list[float | None]]:
    """The heatmap's ``values`` matrix (base64, see http_api.md) as nested lists of floats,
    None for a cell without data."""
    matrix = body["values"]
    assert set(matrix) == {"dtype", "shape", "data", "missing"}, matrix.keys()
    rows, columns = matrix["shape"]
    assert (rows, columns) == (len(body["layers"]), len(body["columns"]))
    dtype = {"float32": "<f4", "float64": "<f8"}[matrix["dtype"]]
    values = np.frombuffer(base64.b64decode(matrix["data"]), dtype).astype(np.float64)
    assert values.size == rows * columns
    missing = np.zeros(rows * columns, dtype=bool)
    if matrix["missing"] is not None:
        bits = np.frombuffer(base64.b64decode(matrix["missing"]), np.uint8)
        missing = np.unpackbits(bits, bitorder="little")[: rows * columns].astype(bool)
        assert missing.any() and np.isnan(values[missing]).all()
    cells = [None if gone else value for value, gone in zip(values.tolist(), missing.tolist())]
    return [cells[r * columns : (r + 1) * columns] for r in range(rows)]


def stored(record: NumericsRecord) -> NumericsRecord:
    """``record`` as read back: statistics in float32 unless the dtype is float64."""
    if record.dtype == "float64":
        return record
    rounded = {k: float(np.float32(v)) for k, v in record.statistics.items()}
    return dataclasses.replace(record, statistics=rounded)


@dataclasses.dataclass
class Layout:
    """What a test logdir holds: {run: {(tensor_type, layer): {step: record}}}."""

    records: dict[str, dict[tuple[str, str], dict[int, NumericsRecord]]]
    module_types: dict[str, str]

    def layers(self, run: str, tensor_type: str) -> list[str]:
        return [name for (t, name) in self.records[run] if t == tensor_type]

    def steps(self, run: str, tensor_type: str, layer: str) -> list[int]:
        return sorted(self.records[run][(tensor_type, layer)])


#: tensor type -> (dtype, recorded formats, step stride)
TYPES = {
    "Activation": ("float32", ("float8_e4m3fn",), 1),
    "Gradient": ("bfloat16", (), 3),
    "Weight": ("float64", ("float8_e5m2", "float16"), 5),
    "Optimiser_State.exp_avg": ("float16", (), 7),
}
LAYERS = ("embed", "blocks.0.attn", "blocks.0.mlp", "blocks.1.attn", "<img src=x onerror=1>")
#: The steps ``write_logdir`` writes unless told otherwise (the route tests' logdir).
STEPS = 40


def write_logdir(root: Path, steps: int = STEPS, seed: int = 0) -> Layout:
    """Two runs (``alpha`` with scalars written by a PyTorch SummaryWriter into the same
    file, ``nested/beta``), every type of ``TYPES``, sampled steps, empty and non-finite
    records."""
    from torch.utils.tensorboard import SummaryWriter  # here: the JAX-only environments lack it

    rng = np.random.default_rng(seed)
    layout = Layout({}, {name: f"Module{i}" for i, name in enumerate(LAYERS)})
    for run in ("alpha", "nested/beta"):
        summary = SummaryWriter(str(root / run)) if run == "alpha" else None
        writer = NumericsWriter(writer=summary) if summary else NumericsWriter(str(root / run))
        held = layout.records.setdefault(run, {})
        for step in range(steps):
            for tensor_type, (dtype, formats, stride) in TYPES.items():
                if step % stride:
                    continue
                for order, layer in enumerate(LAYERS if run == "alpha" else LAYERS[:3]):
                    kind = "normal"
                    if layer == "blocks.0.mlp" and step == 6:
                        kind = "nonfinite"
                    if layer == "blocks.1.attn" and step == 9:
                        kind = "empty"
                    record = make_record(rng, dtype, formats, kind)
                    writer.add_record(
                        layer, record, step, tensor_type, layout.module_types[layer], order
                    )
                    held.setdefault((tensor_type, layer), {})[step] = stored(record)
            if summary:
                summary.add_scalar("loss", 3.0 / (step + 1), step)
                summary.add_scalar("lr", 0.1, step)
        writer.close()
        if summary:
            summary.close()
    return layout


def plugin_loaders() -> list:
    """TensorBoard's plugins with ours (found through the entry point once installed)."""
    plugins = tb_default.get_plugins()
    return plugins if NumericsLoader in plugins else [*plugins, NumericsLoader]


class TensorBoardApp:
    """TensorBoard's real WSGI app over a logdir, on either loader, in this process."""

    def __init__(self, logdir: Path, loader: str, reload_interval: float = 0):
        tb = program.TensorBoard(plugins=plugin_loaders())
        tb.configure(
            logdir=str(logdir),
            reload_interval=reload_interval,
            reload_task="blocking" if reload_interval == 0 else "thread",
        )
        self.flags = tb.flags
        self.ingester = self._ingester(loader)
        provider = self.ingester.data_provider
        multiplexer = getattr(self.ingester, "deprecated_multiplexer", None)
        self.app = application.TensorBoardWSGIApp(
            self.flags, tb.plugin_loaders, provider, None, multiplexer
        )
        self.provider = provider
        self.client = Client(self.app)

    def _ingester(self, loader: str):
        if loader == "python":
            ingester = data_ingester.LocalDataIngester(self.flags)
        else:
            ingester = server_ingester.SubprocessServerDataIngester(
                server_binary=server_ingester.get_server_binary(),
                logdir=self.flags.logdir,
                reload_interval=self.flags.reload_interval,
                channel_creds_type=self.flags.grpc_creds_type,
                samples_per_plugin=self.flags.samples_per_plugin,
            )
        ingester.start()
        return ingester

    def wait_for(self, tags: int, max_step: int, timeout: float = 30) -> None:
        """Wait until the provider lists ``tags`` numerics tags, the last at ``max_step``."""
        deadline = time.time() + timeout
        while True:
            listing = self.provider.list_tensors(
                tb_context.RequestContext(), experiment_id="", plugin_name="tandv"
            )
            series = [s for run in listing.values() for s in run.values()]
            if len(series) >= tags and series and max(s.max_step for s in series) >= max_step:
                return
            if time.time() > deadline:
                raise TimeoutError(f"TensorBoard listed {len(series)} of {tags} tags")
            time.sleep(0.1)

    def get(self, route: str, **params):
        return self.client.get(PREFIX + route, query_string=params)

    def json(self, route: str, expect: int = 200, **params):
        response = self.get(route, **params)
        assert response.status_code == expect, (route, params, response.get_data(as_text=True))
        return response.get_json()

    def close(self) -> None:
        stdin = getattr(self.ingester, "_stdin_handle", None)
        if stdin is not None:
            stdin.close()  # the data server was started with --die-after-stdin


class PluginRoutes:
    """``NumericsPlugin`` as TensorBoard makes it, over a given data provider, its routes
    called in this process."""

    def __init__(self, provider, logdir: Path, cache_dir: Path):
        flags = argparse.Namespace(tandv_cache_dir=str(cache_dir))
        context = base_plugin.TBContext(data_provider=provider, logdir=str(logdir), flags=flags)
        self.plugin = NumericsPlugin(context)
        self._apps = self.plugin.get_plugin_apps()

    def json(self, route: str, **params):
        response = Client(self._apps[f"/{route}"]).get(f"/{route}", query_string=params)
        assert response.status_code == 200, (route, params, response.get_data(as_text=True))
        return response.get_json()

    def close(self) -> None:
        self.plugin._worker.close()
        self.plugin._store.close()


def unread_provider(folder: Path) -> data_provider.MultiplexerDataProvider:
    """TensorBoard's own provider over a logdir it has not read: it lists no run (what
    the plugin lists then comes from its store)."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    return data_provider.MultiplexerDataProvider(multiplexer, str(folder / "unread"))


def store_query(store: NumericsStore, provider, **params) -> numerics_routes.Query:
    """A request's ``Query`` over the store (tags listed from it), with ``params``."""
    listing = Listing(store_tags(store, provider))
    text = {name: str(value) for name, value in params.items()}
    return numerics_routes.Query(
        listing,
        store,
        Scalars(store, provider),
        tb_context.RequestContext(),
        "",
        Params(MultiDict(text)),
    )


def _tensorboard_command() -> list[str]:
    found = [
        ep
        for ep in importlib.metadata.entry_points(group="tensorboard_plugins")
        if ep.name == "tandv"
    ]
    assert found, "the tensorboard_plugins entry point 'tandv' is not installed (pip install -e .)"
    script = Path(sys.executable).with_name("tensorboard")
    return [str(script)] if script.exists() else [shutil.which("tensorboard")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class TensorBoardProcess:
    """A ``tensorboard`` process on a free local port; ``get`` fetches a path and returns
    (status, body, headers)."""

    def __init__(
        self,
        logdir: Path | str | None,
        load_fast: str,
        *extra: str,
        log_folder: Path | None = None,
    ):
        """``logdir`` a folder or a URL (None: ``extra`` gives ``--logdir_spec``); the log
        goes to ``log_folder`` (default: the logdir's parent folder)."""
        self.port = _free_port()
        folder = log_folder or Path(logdir).parent
        self.log = open(folder / f"tb_{load_fast}_{self.port}.log", "w+")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                *_tensorboard_command(),
                *([] if logdir is None else [f"--logdir={logdir}"]),
                "--host=127.0.0.1",
                f"--port={self.port}",
                f"--load_fast={load_fast}",
                "--reload_interval=1",
                *extra,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        )

    def get(self, path: str, timeout: float = 30) -> tuple[int, bytes, dict]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, error.read(), dict(error.headers)

    def json(self, path: str):
        status, body, _ = self.get(path)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def wait(self, predicate, what: str, timeout: float = 90):
        deadline = time.time() + timeout
        while True:
            if self.process.poll() is not None:
                self.log.seek(0)
                pytest.fail(f"tensorboard exited: {self.log.read()[-3000:]}")
            try:
                result = predicate()
                if result:
                    return result
            except (OSError, AssertionError, KeyError, ValueError):
                pass
            if time.time() > deadline:
                self.log.seek(0)
                pytest.fail(f"timed out waiting for {what}: {self.log.read()[-3000:]}")
            time.sleep(0.3)

    def rss_mib(self) -> dict[str, float]:
        """Resident memory (MiB) of the tensorboard process and of its children (the data
        server with ``--load_fast=true``)."""
        pid = self.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children")
        kids = [int(p) for p in children.read_text().split()] if children.exists() else []
        return {"tensorboard": _rss_mib(pid), "children": sum(_rss_mib(k) for k in kids)}

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


class TensorBoardSpecProcess(TensorBoardProcess):
    """A ``tensorboard`` given ``--logdir_spec`` (which excludes ``--logdir``): no local
    logdir for the plugin."""

    def __init__(self, spec: str, folder: Path):
        self.port = _free_port()
        self.log = open(folder / f"tb_spec_{self.port}.log", "w+")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                *_tensorboard_command(),
                f"--logdir_spec={spec}",
                "--host=127.0.0.1",
                f"--port={self.port}",
                "--reload_interval=1",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        )
