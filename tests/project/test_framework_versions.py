"""The torch, jax and flax under test: the floors are written once (``tandv_tb.versions``,
pyproject.toml and compat.mk agree), each `make compat` environment holds what it asked for,
and a framework below its floor stops ``import tandv_tb.torch`` / ``tandv_tb.jax`` with an
``ImportError`` naming both versions.

`make compat` names the framework it installed in ``TANDV_EXPECT_TORCH``,
``TANDV_EXPECT_JAX`` and ``TANDV_EXPECT_FLAX``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tandv_tb import versions
from tests.helpers import REPO

#: The package's extra and the name compat.mk gives each framework's floor.
FRAMEWORKS = {"torch": ("torch", "TORCH_FLOOR"), "jax": ("jax", "JAX_FLOOR"),
              "flax": ("jax", "FLAX_FLOOR")}  # fmt: skip


def extra_requirement(extra: str, name: str) -> Requirement:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library of 3.11+")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (found,) = [
        parsed
        for parsed in map(Requirement, pyproject["project"]["optional-dependencies"][extra])
        if parsed.name == name
    ]
    return found


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_the_floors_of_pyproject_compat_and_the_import_check_are_one(name):
    extra, variable = FRAMEWORKS[name]
    (pyproject,) = [
        s.version for s in extra_requirement(extra, name).specifier if s.operator == ">="
    ]
    compat = (REPO / "compat.mk").read_text(encoding="utf-8")
    (tested,) = re.findall(rf"^{variable} := (\S+)$", compat, re.M)
    assert Version(pyproject) == Version(tested) == Version(versions.FLOORS[name])


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_the_installed_framework_is_in_range_and_the_one_compat_asked_for(name):
    installed = versions.installed(name)
    if installed is None:
        pytest.skip(f"{name} is not installed here")
    print(f"{name} {installed}")
    extra, _ = FRAMEWORKS[name]
    assert extra_requirement(extra, name).specifier.contains(installed, prereleases=True)
    expected = os.environ.get(f"TANDV_EXPECT_{name.upper()}")
    if expected:
        assert Version(installed).release == Version(expected).release


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_below_the_floor_the_import_names_the_installed_version_and_the_floor(name):
    """The floor raised above the installed release, in a fresh interpreter: the package's
    import stops at once, naming both (not an AttributeError from deep inside)."""
    installed = versions.installed(name)
    if installed is None:
        pytest.skip(f"{name} is not installed here")
    code = (
        "from tandv_tb import versions\n"
        f"versions.FLOORS[{name!r}] = '999.0'\n"
        f"import tandv_tb.{name}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"ImportError: tandv_tb needs {name} 999.0 or later; {name} {installed} is installed "
        f"(pip install -U '{name}>=999.0')"
    ), done.stderr


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_a_build_of_the_floor_release_itself_is_in_range(name, monkeypatch):
    """The release is compared: a local build (``2.13.0+cpu``) or a pre-release of the floor
    release, as vendor images ship, passes."""
    installed = versions.installed(name)
    if installed is None:
        pytest.skip(f"{name} is not installed here")
    release = ".".join(map(str, Version(installed).release))
    monkeypatch.setitem(versions.FLOORS, name, release)
    versions.require(name)


def test_what_a_release_lacks_is_said_once(monkeypatch):
    monkeypatch.setattr(versions, "_said", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            versions.lacking("a feature", "torch 9.9", "the rest goes on")
    assert [str(w.message) for w in caught] == [
        "tandv_tb: a feature needs torch 9.9 or later; the rest goes on"
    ]
    assert caught[0].category is versions.NewerReleaseWarning
