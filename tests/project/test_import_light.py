"""TensorBoard imports ``tandv_tb.plugin`` at every start: it must stay light.

Each import runs in a fresh interpreter, so what an earlier test imported does not count.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numba", "pandas", "torch", "jax")


def loaded_after(statement: str) -> list[str]:
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("statement", ["import tandv_tb.plugin", "import tandv_tb"])
def test_import_loads_no_heavy_library(statement):
    modules = set(loaded_after(statement))
    assert [m for m in HEAVY if m in modules] == [], f"{statement} loads them"


def test_public_names_still_import_on_first_use():
    modules = loaded_after("import tandv_tb\ntandv_tb.read_frame, tandv_tb.NumericsWriter")
    assert "pandas" in modules and "tandv_tb.writer" in modules


def test_loading_the_plugin_class_does_not_load_the_scanner():
    """numba's scanner is imported when the plugin first reads a file, not at start."""
    modules = set(loaded_after("from tandv_tb.plugin.plugin import NumericsPlugin"))
    scanner = (
        "tandv_tb.event_files.event_scan",
        "tandv_tb.event_files.event_wire",
        "tandv_tb.event_files.tag_intern",
    )
    assert [m for m in scanner if m in modules] == []
    assert [m for m in ("pandas", "torch", "jax") if m in modules] == []
