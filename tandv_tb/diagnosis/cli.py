"""The command line: ``tandv-tb findings LOGDIR [--run R | --compare RUN_A RUN_B]
[--groups | --all] [--json] [--fail-on LEVEL]`` (``LOGDIR`` a folder or any fsspec URL:
``s3://bucket/runs``).

Prints each run's headline, then the grouped findings as a table, then which runs were
compared: a logdir's story on one screen. The table folds what is expected of a format
(the ``underflow`` groups of an unscaled format and their ``scale`` groups, every group of
a block-scaled format: ``folding``) into one line per run for its element formats and one
for its block formats; ``--groups`` prints every group instead, ``--all`` one finding per
tensor. ``--json`` prints a JSON list of objects (``value`` null where it is NaN): every
group with its ``tensors`` count and the ``findings`` it stands for, or with ``--all``
one object per finding, with the columns of ``tandv_tb.findings`` (the folding is only a
way of printing). Exits 1 when a finding at or above ``--fail-on`` (default ``error``)
exists, else 0, so a pipeline can gate on it. Bad arguments, a missing logdir, storage
that cannot be read (denied, unreachable) or an unknown run exit 2 with one line on
stderr. Imports are kept to what the findings need (no pandas, torch or jax).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from typing import TYPE_CHECKING, Literal

from tandv_tb.diagnosis.base import SEVERITIES, severity_rank

if TYPE_CHECKING:
    from tandv_tb.diagnosis.analysis import Diagnosis
    from tandv_tb.diagnosis.folding import Fold
    from tandv_tb.diagnosis.grouping import Group

PROG = "tandv-tb"
#: Characters that would break a table line or hide text in a terminal: control
#: characters, line and paragraph separators, bidirectional overrides.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_TABLE = ("severity", "run", "step", "kind", "message")  # the name is in the message
_GROUPED = ("severity", "run", "step", "kind", "tensors", "message")
#: What a folded line adds on the command line (the card opens the fold instead).
FOLD_HINT = " (--groups lists them)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        raise _Usage(f"{self.prog}: {message} (see --help)")


class _Usage(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="tandv_tb on the command line.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    findings = commands.add_parser(
        "findings",
        help="what went wrong in the runs under a logdir",
        description="Name what went wrong in the runs under LOGDIR (NaN/Inf, overflow and "
        "underflow in the recorded formats, drift, dead tensors, loss spikes, runs that "
        "part): each run's headline (its first problem), then one line per group of "
        "findings (one run, kind, format and tensor type), where the underflow of an "
        "unscaled format and the scales that remedy it, and what a block-scaled format "
        "would lose, are folded into one line per run for its element formats and one "
        "for its block formats (--groups: every "
        "group; --all: every finding; --json: every group, "
        "or with --all every finding). Exit status: 1 when a finding at or above "
        "--fail-on exists, else 0; 2 for bad arguments or a missing logdir.",
    )
    findings.add_argument("logdir", metavar="LOGDIR", help="a folder or a URL (s3://, gs://, ...)")
    findings.add_argument("--run", metavar="R", help="only this run (as TensorBoard names it)")
    findings.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="only these two runs, compared for divergence whatever tensors they share",
    )
    shown = findings.add_mutually_exclusive_group()
    shown.add_argument(
        "--groups",
        action="store_true",
        help="every group on its own line: by default the underflow of an unscaled format "
        "and its scales, and what a block-scaled format would lose (expected, not the "
        "headline), are folded into one line per run for its element formats and one for "
        "its block formats",
    )
    shown.add_argument("--all", action="store_true", help="one finding per tensor, not grouped")
    findings.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of objects: every group, with its tensors count and the "
        "findings it stands for (with --all: every finding), nothing folded",
    )
    findings.add_argument(
        "--fail-on",
        choices=SEVERITIES,
        default="error",
        help="exit 1 when a finding of this severity or a worse one exists (default: error)",
    )
    return parser


def escape(text: str) -> str:
    """``text`` with unprintable characters written as escapes (``\\n``, ``\\x1b``)."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def table(rows: list, columns: tuple[str, ...]) -> list[str]:
    """``rows`` (findings or groups) as aligned text columns, a header line first; the
    last column is not padded."""
    cells = [[c.upper() for c in columns]]
    cells += [[escape(str(getattr(row, c))) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(line, widths)), line[-1]]) for line in cells
    ]


def report(found: Diagnosis, shown: Literal["view", "groups", "all"]) -> str:
    """The headlines, the findings and which runs were compared, as text: ``shown`` is
    ``"view"`` (the default view, folds hinting at ``--groups``), ``"groups"`` or
    ``"all"`` (one finding per tensor)."""
    if not found.headlines:
        return "no findings"
    width = max(len(escape(h.run)) for h in found.headlines)
    lines = [f"{escape(h.run).ljust(width)}  {escape(h.message)}" for h in found.headlines]
    if shown == "all":
        rows = found.findings
    else:
        rows = [_Row.of(r) for r in (found.groups if shown == "groups" else found.view)]
    if rows:
        lines += ["", *table(rows, _TABLE if shown == "all" else _GROUPED)]
    note = found.comparisons.note()
    if found.comparisons.left_out:
        note += " (--compare RUN_A RUN_B compares any two)"
    if note:
        lines += ["", escape(note)]
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class _Row:
    """A line of the grouped table."""

    severity: str
    run: str
    step: int
    kind: str
    tensors: int
    message: str

    @classmethod
    def of(cls, row: Group | Fold) -> _Row:
        from tandv_tb.diagnosis.folding import Fold  # loaded by the findings already

        hint = FOLD_HINT if isinstance(row, Fold) else ""
        return cls(row.severity, row.run, row.step, row.kind, row.tensors, row.message + hint)


def _json_row(row: dict) -> dict:
    return {**row, "value": None if math.isnan(row["value"]) else row["value"]}


def as_json(found: Diagnosis, every: bool) -> str:
    """Every finding (``every``), or the groups, each with the findings it stands for."""
    if every:
        rows = [_json_row(f.row()) for f in found.findings]
    else:
        rows = [
            {**_json_row(g.row()), "findings": [_json_row(f.row()) for f in g.findings]}
            for g in found.groups
        ]
    return json.dumps(rows, ensure_ascii=False, indent=1)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.run is not None and args.compare is not None:
            raise _Usage(f"{PROG} findings: give --run or --compare, not both (see --help)")
    except _Usage as usage:
        print(usage, file=sys.stderr)
        return 2
    from tandv_tb.diagnosis import find
    from tandv_tb.filesystems.locations import StorageError

    try:
        found = find(args.logdir, run=args.run, compare=args.compare)
    except (FileNotFoundError, NotADirectoryError, ValueError, StorageError) as error:
        print(f"{PROG} findings: {error}", file=sys.stderr)
        return 2
    shown = "all" if args.all else "groups" if args.groups else "view"
    print(as_json(found, args.all) if args.json else report(found, shown))
    limit = severity_rank(args.fail_on)
    return 1 if any(severity_rank(f.severity) <= limit for f in found.findings) else 0
