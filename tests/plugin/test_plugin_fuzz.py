"""Random and malformed query strings over every route: never a 5xx, always JSON errors;
through TensorBoard's WSGI app, then through a real ``tensorboard`` process under concurrent
clients, with its memory sampled."""

from __future__ import annotations

import random
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest

from tandv_tb.plugin.plugin import CSV_ROUTES, PLAIN_ROUTES, RUN_ROUTES
from tests.helpers.plugin import LAYERS, TYPES, TensorBoardApp, TensorBoardProcess, write_logdir

REQUESTS = 2400
ROUTES = [*RUN_ROUTES, *PLAIN_ROUTES, *CSV_ROUTES, "static/index.js", "static/", "nothing"]
PARAMS = [
    "run", "tensor_type", "layer", "step", "format", "metric", "columns", "reduce",
    "step_min", "step_max", "layer_regex", "points", "tag",
]  # fmt: skip
GOOD = {
    "run": ["alpha", "nested/beta"],
    "tensor_type": list(TYPES),
    "layer": list(LAYERS),
    "step": ["0", "3", "7", "39", "1000000"],
    "format": ["float8_e4m3fn", "float8_e5m2", "bfloat16", "float4_e2m1fn", "float8_e8m0fnu"],
    "metric": ["log2_rm2", "mean", "underflow_fraction", "overflow_count", "nan_count"],
    "columns": ["1", "3", "1000", "10000"],
    "reduce": ["max", "min", "mean", "last"],
    "step_min": ["0", "5"],
    "step_max": ["10", "39"],
    "layer_regex": ["^blocks", "attn$", ".*"],
    "points": ["1", "7"],
    "tag": ["loss", "lr"],
}
JUNK = [
    "", " ", "-1", "1.5", "nan", "inf", "1e309", "99999999999999999999999999", "0x10", "None",
    "null", "[]", "{}", "'", '"', "<script>", "../..", "%", "%zz", "%00", "\x00", "\u2603",
    "(", "[a-", "a" * 2000, "(a+)+$", "float8", "int8", "float128", "S5", "O", "V8",
    "Activation/embed", "tandv/Activation/embed", "ALPHA", "alpha/", "/alpha",
    "<img src=x onerror=alert(1)>", "</script><script>alert(1)</script>", "\"quoted\"",
    "it's", "..", "../../etc/passwd", "..\\..\\x", "é" * 1000, "\U0001d518\u202e\ufeff",
    "-99999999999999999999", "-0", "+5", "1" * 400, "2147483648", "9223372036854775808",
]  # fmt: skip
RAW = [
    "%", "%%", "%zz", "&&&", "=", "==", "run", "run=", "run=%ff%fe", "run[]=alpha",
    "run=alpha&run=alpha", ";", "run=alpha;tensor_type=Activation", "%26%3D", "a=b=c",
]  # fmt: skip


def _query(rng: random.Random) -> str:
    if rng.random() < 0.08:
        return rng.choice(RAW) + "&" + rng.choice(RAW)
    pairs = []
    for name in rng.sample(PARAMS, rng.randint(0, len(PARAMS))):
        for _ in range(rng.choice([1, 1, 1, 2])):
            pool = GOOD[name] if rng.random() < 0.75 else JUNK
            pairs.append((name, rng.choice(pool)))
    query = urllib.parse.urlencode(pairs)
    if rng.random() < 0.1:
        query += "&" + rng.choice(RAW)
    return query


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    write_logdir(root, steps=12)
    tb = TensorBoardApp(root, "python")
    yield tb
    tb.close()


def test_random_queries_never_give_a_server_error(app):
    rng = random.Random(1234)
    statuses: dict[int, int] = {}
    for _ in range(REQUESTS):
        route = rng.choice(ROUTES)
        query = _query(rng)
        response = app.client.get(f"/data/plugin/tandv/{route}?{query}")
        status = response.status_code
        statuses[status] = statuses.get(status, 0) + 1
        assert status < 500, (route, query, response.get_data(as_text=True)[:500])
        if status >= 400:
            assert response.headers["Content-Type"] == "application/json", (route, query)
            assert response.get_json()["error"], (route, query)
    assert statuses.get(200, 0) > REQUESTS // 10, statuses  # the fuzz reaches real answers
    assert statuses.get(400, 0) > REQUESTS // 10, statuses


@pytest.mark.parametrize(
    "path",
    [
        "static/../plugin/plugin.py",
        "static/..%2fplugin%2fplugin.py",
        "static/%2e%2e/plugin/plugin.py",
        "static/%2e%2e%2f%2e%2e%2fsetup.py",
        "static//etc/passwd",
        "static/..\\plugin\\plugin.py",
        "static/%00index.js",
        "static/index.js%00.png",
        "static/",
        "static/nothing.js",
    ],
)
def test_static_path_traversal_is_refused(app, path):
    response = app.client.get(f"/data/plugin/tandv/{path}")
    assert response.status_code == 404, path
    assert b"NumericsPlugin" not in response.get_data()


def test_static_files_stay_inside_their_folder(tmp_path):
    from tensorboard.errors import NotFoundError as NotFound

    from tandv_tb.plugin.static_files import static_file

    root = tmp_path / "static"
    (root / "sub").mkdir(parents=True)
    (root / "index.js").write_text("export function render() {}")
    (root / "sub" / "chunk.css").write_text("body {}")
    (tmp_path / "secret.txt").write_text("secret")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    assert static_file("index.js", root) == (
        b"export function render() {}",
        "text/javascript; charset=utf-8",
    )
    assert static_file("sub/chunk.css", root)[1] == "text/css; charset=utf-8"
    for bad in ["../secret.txt", "sub/../../secret.txt", "/etc/passwd", "link.txt", "sub", ""]:
        with pytest.raises(NotFound):
            static_file(bad, root)


def test_the_bundle_is_served(app):
    response = app.client.get("/data/plugin/tandv/static/index.js")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert b"render" in response.get_data()


# -- a real tensorboard process ----------------------------------------------------------
PROCESS_REQUESTS = 5000
CLIENTS = 4
REQUEST_TIMEOUT = 20.0
#: Allowed RSS growth (MiB) from after the warm-up to the end: the result cache keeps the
#: answers of distinct queries (bounded by its budget); a leak per request would exceed it.
RSS_SLACK_MIB = {"tensorboard": 30.0, "children": 10.0}


def _paths(rng: random.Random, count: int) -> list[str]:
    paths = []
    for _ in range(count):
        route = rng.choice(ROUTES)
        paths.append(f"/data/plugin/tandv/{route}?{_query(rng)}")
    return paths


def _fetch(server: TensorBoardProcess, path: str) -> tuple[str, int]:
    """(path, status); status -1: no answer in time, -2: a 4xx error that is not JSON."""
    try:
        status, _, headers = server.get(path, timeout=REQUEST_TIMEOUT)
    except OSError:  # a timeout or a dropped connection
        return path, -1
    if 400 <= status < 500 and not headers.get("Content-Type", "").startswith("application/json"):
        return path, -2
    return path, status


def _run(server: TensorBoardProcess, paths: list[str]) -> dict[int, int]:
    statuses: dict[int, int] = {}
    with ThreadPoolExecutor(CLIENTS) as pool:
        for path, status in pool.map(lambda p: _fetch(server, p), paths):
            statuses[status] = statuses.get(status, 0) + 1
            assert status != -1, f"no answer within {REQUEST_TIMEOUT} s: {path}"
            assert status != -2, f"an error that is not JSON: {path}"
            assert status < 500, (status, path)
    return statuses


@pytest.mark.slow
def test_a_real_tensorboard_survives_concurrent_hostile_requests(tmp_path):
    write_logdir(tmp_path / "logdir", steps=12)
    server = TensorBoardProcess(tmp_path / "logdir", "true")
    try:
        server.wait(lambda: len(server.json("/data/plugin/tandv/runs")["runs"]) == 2, "runs")
        rng = random.Random(99)
        _run(server, _paths(rng, 600))  # warm-up: caches, thread pools, lazy imports
        before = server.rss_mib()
        start = time.perf_counter()
        statuses = _run(server, _paths(rng, PROCESS_REQUESTS))
        seconds = time.perf_counter() - start
        after = server.rss_mib()
        print(
            f"{PROCESS_REQUESTS} requests in {seconds:.1f} s; statuses {statuses}; "
            f"RSS MiB before {before}, after {after}"
        )
        assert server.process.poll() is None
        assert statuses.get(200, 0) > PROCESS_REQUESTS // 10, statuses
        assert statuses.get(400, 0) > PROCESS_REQUESTS // 10, statuses
        assert before["children"] > 0  # the data server was measured
        for name, slack in RSS_SLACK_MIB.items():
            assert after[name] - before[name] <= slack, (name, before, after)
    finally:
        server.close()
