"""The diagnosis package's modules import only modules below them (no cycle), in the
order its ``__init__`` docstring gives; read from the source, so a lazy import counts."""

from __future__ import annotations

import ast

from tests.helpers import REPO

PACKAGE = REPO / "tandv_tb" / "diagnosis"
#: From the bottom up; a module may import those of lower floors only.
FLOORS = (
    ("base",),
    ("run_numerics",),
    ("first_nonfinite", "low_precision", "trends", "comparable", "grouping", "headline"),
    ("divergence", "folding"),
    ("analysis",),
    ("__init__",),
    ("cli",),
)


def imported(path) -> set[str]:
    """The diagnosis modules that ``path`` imports (``tandv_tb.diagnosis`` is ``__init__``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name == "tandv_tb.diagnosis":
                found.add("__init__")
            elif name.startswith("tandv_tb.diagnosis."):
                module = name.split(".")[2]
                if (PACKAGE / f"{module}.py").exists():
                    found.add(module)
    return found


def test_every_module_has_a_floor():
    assert sorted(p.stem for p in PACKAGE.glob("*.py")) == sorted(m for f in FLOORS for m in f)


def test_each_module_imports_only_modules_below_it():
    floor = {module: i for i, modules in enumerate(FLOORS) for module in modules}
    upward = {
        module: sorted(m for m in imported(PACKAGE / f"{module}.py") if floor[m] >= floor[module])
        for module in floor
    }
    assert {m: up for m, up in upward.items() if up} == {}
