"""The command line: ``tandv-tb findings LOGDIR [--run R | --compare RUN_A RUN_B] [--all]
[--json] [--fail-on LEVEL]``.

Prints each run's headline, then the grouped findings as a table, then which runs were
compared: a logdir's story on one screen. ``--all`` lists one finding per tensor instead.
``--json`` prints a JSON list of objects (``value`` null where it is NaN): the grouped
findings with their ``tensors`` count and the ``findings`` each stands for, or with
``--all`` one object per finding, with the columns of ``tandv_tb.findings``. Exits 1 when
a finding at or above ``--fail-on`` (default ``error``) exists, else 0, so a pipeline can
gate on it. Bad arguments, a missing logdir or an unknown run exit 2 with one line on
stderr. Imports are kept to what the findings need (no pandas, torch or jax).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import TYPE_CHECKING

from tandv_tb.diagnosis.base import SEVERITIES, severity_rank

if TYPE_CHECKING:
    from tandv_tb.diagnosis.engine import Diagnosis

PROG = "tandv-tb"
#: Characters that would break a table line or hide text in a terminal: control
#: characters, line and paragraph separators, bidirectional overrides.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_TABLE = ("severity", "run", "step", "kind", "message")  # the name is in the message
_GROUPED = ("severity", "run", "step", "kind", "tensors", "message")


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
        "part). Exit status: 1 when a finding at or above --fail-on exists, else 0; 2 "
        "for bad arguments or a missing logdir.",
    )
    findings.add_argument("logdir", metavar="LOGDIR")
    findings.add_argument("--run", metavar="R", help="only this run (as TensorBoard names it)")
    findings.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="only these two runs, compared for divergence whatever tensors they share",
    )
    findings.add_argument("--all", action="store_true", help="one finding per tensor, not grouped")
    findings.add_argument("--json", action="store_true", help="print a JSON list of objects")
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


def report(found: Diagnosis, every: bool) -> str:
    """The headlines, the findings (grouped, or with ``every`` one per tensor) and which
    runs were compared, as text."""
    if not found.headlines:
        return "no findings"
    width = max(len(escape(h.run)) for h in found.headlines)
    lines = [f"{escape(h.run).ljust(width)}  {escape(h.message)}" for h in found.headlines]
    rows = found.findings if every else found.groups
    if rows:
        lines += ["", *table(rows, _TABLE if every else _GROUPED)]
    note = found.comparisons.note()
    if found.comparisons.left_out:
        note += " (--compare RUN_A RUN_B compares any two)"
    if note:
        lines += ["", escape(note)]
    return "\n".join(lines)


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

    try:
        found = find(args.logdir, run=args.run, compare=args.compare)
    except (FileNotFoundError, NotADirectoryError, ValueError) as error:
        print(f"{PROG} findings: {error}", file=sys.stderr)
        return 2
    print(as_json(found, args.all) if args.json else report(found, args.all))
    limit = severity_rank(args.fail_on)
    return 1 if any(severity_rank(f.severity) <= limit for f in found.findings) else 0
