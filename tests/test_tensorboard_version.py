"""The TensorBoard under test: within the package's range, and the one `make compat` asked for.

`make compat` puts an oldest or newest TensorBoard first on PYTHONPATH and names it in
``TANDV_EXPECT_TENSORBOARD``; the ``tensorboard`` processes of the end-to-end test inherit
that environment, so they run the same TensorBoard as this check.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from tensorboard import version as tensorboard_version

ROOT = Path(__file__).resolve().parent.parent


def tensorboard_requirement() -> Requirement:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library of 3.11+")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (line,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("tensorboard")]
    return Requirement(line)


def test_the_imported_tensorboard_is_allowed_by_the_package():
    imported = tensorboard_version.VERSION
    print(f"TensorBoard {imported} from {Path(tensorboard_version.__file__).parent.parent}")
    assert tensorboard_requirement().specifier.contains(imported), imported


def test_the_imported_tensorboard_is_the_one_the_compatibility_job_asked_for():
    expected = os.environ.get("TANDV_EXPECT_TENSORBOARD")
    if not expected:
        pytest.skip("only under `make compat` (TANDV_EXPECT_TENSORBOARD unset)")
    imported = tensorboard_version.VERSION
    print(f"TensorBoard {imported} (the compatibility job asked for {expected})")
    assert imported == expected
    assert importlib.metadata.version("tensorboard") == expected


def test_the_compatibility_job_tests_the_package_floor():
    """``TB_OLDEST`` in compat.mk is the floor of ``tensorboard`` in pyproject.toml."""
    text = (ROOT / "compat.mk").read_text(encoding="utf-8")
    (oldest,) = re.findall(r"^TB_OLDEST := (\S+)$", text, re.M)
    (floor,) = [s.version for s in tensorboard_requirement().specifier if s.operator == ">="]
    assert Version(oldest) == Version(floor)
