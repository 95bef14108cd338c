"""The TensorBoard under test: within the package's range, and the one `make compat` asked for.

`make compat` puts an oldest or newest TensorBoard first on PYTHONPATH and names it in
``TANDV_EXPECT_TENSORBOARD`` (the oldest protobuf in ``TANDV_EXPECT_PROTOBUF``); the
``tensorboard`` processes of the end-to-end test inherit that environment, so they run the
same TensorBoard as this check.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path

import google.protobuf
import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from tensorboard import version as tensorboard_version

from tests.helpers import REPO


def requirement(name: str) -> Requirement:
    """The package's requirement on ``name``, from pyproject.toml."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library of 3.11+")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (found,) = [
        parsed
        for parsed in map(Requirement, pyproject["project"]["dependencies"])
        if parsed.name == name
    ]
    return found


def floor(name: str) -> Version:
    (version,) = [s.version for s in requirement(name).specifier if s.operator == ">="]
    return Version(version)


def test_the_imported_tensorboard_is_allowed_by_the_package():
    imported = tensorboard_version.VERSION
    print(f"TensorBoard {imported} from {Path(tensorboard_version.__file__).parent.parent}")
    assert requirement("tensorboard").specifier.contains(imported), imported


def test_the_imported_tensorboard_is_the_one_the_compatibility_job_asked_for():
    expected = os.environ.get("TANDV_EXPECT_TENSORBOARD")
    if not expected:
        pytest.skip("only under `make compat` (TANDV_EXPECT_TENSORBOARD unset)")
    imported = tensorboard_version.VERSION
    print(f"TensorBoard {imported} (the compatibility job asked for {expected})")
    assert imported == expected
    assert importlib.metadata.version("tensorboard") == expected
    expected_protobuf = os.environ.get("TANDV_EXPECT_PROTOBUF")
    if expected_protobuf:
        print(f"protobuf {google.protobuf.__version__} (asked for {expected_protobuf})")
        assert google.protobuf.__version__ == expected_protobuf


def test_the_compatibility_job_tests_the_package_floors():
    """``TB_OLDEST`` and ``PROTOBUF_OLDEST`` in compat.mk are the floors in pyproject.toml."""
    text = (REPO / "compat.mk").read_text(encoding="utf-8")
    (tensorboard,) = re.findall(r"^TB_OLDEST := (\S+)$", text, re.M)
    (protobuf,) = re.findall(r"^PROTOBUF_OLDEST := (\S+)$", text, re.M)
    assert Version(tensorboard) == floor("tensorboard")
    assert Version(protobuf) == floor("protobuf")
