"""docs/contract.md names what the code names; and, where the project's contract lies beside
the checkout (``../shared/CONTRACT.md``, as in CI), what that contract names too."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tandv_tb.diagnosis.base import COLUMNS, KINDS
from tandv_tb.event_files.metadata import PLUGIN_NAME, TENSOR_TYPES
from tandv_tb.event_files.record import COUNTS, STATISTICS
from tandv_tb.frame.schema import METADATA_COLUMNS
from tandv_tb.tracking.nonfinite_policy import POLICIES, StepReport
from tests.helpers import REPO

DOC = (REPO / "docs" / "contract.md").read_text(encoding="utf-8")
UPSTREAM = REPO.parent / "shared" / "CONTRACT.md"

IN_CODE = {
    "tensor types": TENSOR_TYPES,
    "counts": COUNTS,
    "statistics": STATISTICS,
    "metadata columns": METADATA_COLUMNS,
    "finding kinds": KINDS,
    "finding columns": COLUMNS,
}


def section(text: str, heading: str) -> str:
    """The text under a heading, up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    match = re.search(
        rf"^{re.escape(heading)}\n(.*?)(?=^#{{1,{len(level)}}} |\Z)", text, re.M | re.S
    )
    assert match, f"no section {heading!r}"
    return match.group(1)


def table_names(text: str, header: str) -> tuple[str, ...]:
    """The first column's names of the table whose header row starts with ``| header |``."""
    match = re.search(rf"^\| {re.escape(header)} \|.*\n\|[- |]+\n((?:\|.*\n)+)", text, re.M)
    assert match, f"no table headed {header!r}"
    return tuple(re.findall(r"^\| `([^`]+)` \|", match.group(1), re.M))


def test_the_doc_names_the_report_fields_and_the_policies():
    policy = section(DOC, "## Acting on NaN/Inf: `on_nonfinite`")
    rows = re.findall(r"^\| (`.*?) \|", policy, re.M)
    named = [n for row in rows for n in re.findall(r"`([\w\"]+)`", row)]
    fields = [f.name for f in dataclasses.fields(StepReport)]
    assert [n for n in named if not n.startswith('"')] == fields
    assert [n.strip('"') for n in named if n.startswith('"')] == list(POLICIES)


def in_doc() -> dict[str, tuple[str, ...]]:
    frame = section(DOC, "## The pandas frame")
    findings = section(DOC, "## Findings")
    return {
        "tensor types": table_names(section(DOC, "## Tensor types"), "type"),
        "counts": table_names(section(DOC, "## Counts"), "count"),
        "statistics": table_names(section(DOC, "## Statistics"), "statistic"),
        "metadata columns": table_names(frame, "column"),
        "finding kinds": table_names(findings, "kind"),
        "finding columns": table_names(findings, "column"),
    }


def in_upstream(text: str) -> dict[str, tuple[str, ...]]:
    """The same names as the project's contract spells them (in prose and tables)."""
    tensor_type = re.search(r"^- \*\*tensor_type\*\*:(.*?)(?=^- \*\*)", text, re.M | re.S)
    stats_rows = re.findall(
        r"^\| (`.*?) \| (.*?) \|$", section(text, "## Scalar statistics (defaults)"), re.M
    )
    counts = [
        n for names, what in stats_rows if what == "counts" for n in re.findall(r"`(\w+)`", names)
    ]
    statistics = [
        n for names, what in stats_rows if what != "counts" for n in re.findall(r"`(\w+)`", names)
    ]
    metadata = re.search(r"^- `metadata`:(.*?)(?=^- `)", text, re.M | re.S)
    diagnosis = section(text, "## Diagnosis")
    kinds = re.search(r"Kinds\s+include(.*?)\n- ", diagnosis, re.S)
    columns = re.search(r"one\s+row\s+per\s+finding,\s+columns(.*?);\s+sorted", diagnosis, re.S)
    return {
        "tensor types": tuple(re.findall(r"`([A-Z][A-Za-z_]*)`", tensor_type.group(1))),
        "counts": tuple(counts),
        "statistics": tuple(statistics),
        "metadata columns": tuple(re.findall(r"`(\w+)` \(", metadata.group(1))),
        "finding kinds": tuple(re.findall(r"`([a-z_]+)`", kinds.group(1))),
        "finding columns": tuple(re.findall(r"`(\w+)` \(", columns.group(1))),
    }


@pytest.mark.parametrize("concept", sorted(IN_CODE))
def test_the_doc_names_what_the_code_names(concept):
    assert in_doc()[concept] == tuple(IN_CODE[concept])


def test_the_doc_names_the_plugin_and_its_tab():
    tensorboard = section(DOC, "## In TensorBoard")
    assert f"The plugin is called `{PLUGIN_NAME}` and its tab **Numerics**" in tensorboard


@pytest.mark.skipif(not UPSTREAM.exists(), reason=f"no project contract at {UPSTREAM}")
@pytest.mark.parametrize("concept", sorted(IN_CODE))
def test_the_project_contract_names_the_same(concept):
    upstream = in_upstream(UPSTREAM.read_text(encoding="utf-8"))
    assert upstream[concept] == tuple(IN_CODE[concept])


@pytest.mark.skipif(not UPSTREAM.exists(), reason=f"no project contract at {UPSTREAM}")
def test_the_project_contract_names_the_same_plugin():
    assert f"Plugin name `{PLUGIN_NAME}`, tab title **Numerics**" in UPSTREAM.read_text(
        encoding="utf-8"
    )
