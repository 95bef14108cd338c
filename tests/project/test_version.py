"""The version is written once (``tandv_tb.__version__``), and the built wheel carries it, the
entry points, the frontend bundle and the HTTP API's description."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import shutil
import subprocess
import sys
import zipfile

import pytest

import tandv_tb
from tests.helpers import REPO


def test_the_version_is_written_only_in_tandv_tb():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library of 3.11+")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tandv_tb.__version__"}
    assert "version" not in (REPO / "setup.py").read_text(encoding="utf-8")
    package = json.loads((REPO / "tandv_tb_frontend" / "package.json").read_text("utf-8"))
    assert "version" not in package  # private: the Python package's version is the one


def test_the_version_is_a_literal_that_setuptools_reads_without_importing():
    """A build environment lacks the dependencies, so ``attr:`` must find a plain literal."""
    tree = ast.parse((REPO / "tandv_tb" / "__init__.py").read_text(encoding="utf-8"))
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == ["__version__"]
    ]
    assert isinstance(value, ast.Constant) and value.value == tandv_tb.__version__


def test_the_installed_distribution_has_the_version():
    assert importlib.metadata.version("tandv_tb") == tandv_tb.__version__


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built (with this environment's setuptools) from a copy of the sources."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "tandv_tb", source / "tandv_tb", ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(source)],
        check=True,
    )  # fmt: skip
    (built,) = out.glob("*.whl")
    return zipfile.ZipFile(built)


def dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [p for p in wheel.namelist() if p.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode("utf-8")


def test_the_wheel_has_the_version_and_the_entry_points(wheel):
    metadata = dist_info(wheel, "METADATA")
    assert f"\nVersion: {tandv_tb.__version__}\n" in metadata
    assert "\nRequires-Dist: tensorboard>=" in metadata
    entry_points = dist_info(wheel, "entry_points.txt")
    assert "[tensorboard_plugins]\ntandv = tandv_tb.plugin:NumericsLoader" in entry_points
    assert "[console_scripts]\ntandv-tb = tandv_tb.diagnosis.cli:main" in entry_points


def test_the_wheel_has_the_frontend_bundle_and_the_http_api(wheel):
    names = set(wheel.namelist())
    for path in (REPO / "tandv_tb" / "static").rglob("*"):
        if path.is_file():
            assert path.relative_to(REPO).as_posix() in names
    assert "tandv_tb/static/index.js" in names
    assert "tandv_tb/plugin/http_api.md" in names
