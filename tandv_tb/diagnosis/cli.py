"""The command line: ``tandv-tb findings LOGDIR [--run R] [--json] [--fail-on LEVEL]``
(``LOGDIR`` a folder or any fsspec URL: ``s3://bucket/runs``).

Prints the findings as a table (or a JSON list of objects with the columns of
``tandv_tb.findings``, ``value`` null where it is NaN) and exits 1 when a finding at or
above ``--fail-on`` (default ``error``) exists, else 0, so a pipeline can gate on it. Bad
arguments, a missing logdir, storage that cannot be read (denied, unreachable) or an
unknown run exit 2 with one line on stderr. Imports are
kept to what the findings need (no pandas, torch or jax).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

from tandv_tb.diagnosis.base import SEVERITIES, Finding, severity_rank

PROG = "tandv-tb"
#: Characters that would break a table line or hide text in a terminal: control
#: characters, line and paragraph separators, bidirectional overrides.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_TABLE = ("severity", "run", "step", "kind", "message")  # the name is in the message


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
    findings.add_argument("logdir", metavar="LOGDIR", help="a folder or a URL (s3://, gs://, ...)")
    findings.add_argument("--run", metavar="R", help="only this run (as TensorBoard names it)")
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


def table(found: list[Finding]) -> str:
    """The findings as aligned text columns, one line each."""
    if not found:
        return "no findings"
    rows = [[h.upper() for h in _TABLE]]
    rows += [[escape(str(getattr(f, column))) for column in _TABLE] for f in found]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_TABLE) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]) for row in rows
    )


def as_json(found: list[Finding]) -> str:
    rows = []
    for f in found:
        row = f.row()
        row["value"] = None if math.isnan(row["value"]) else row["value"]
        rows.append(row)
    return json.dumps(rows, ensure_ascii=False, indent=1)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except _Usage as usage:
        print(usage, file=sys.stderr)
        return 2
    from tandv_tb.diagnosis import find
    from tandv_tb.disk.locations import StorageError

    try:
        found = find(args.logdir, run=args.run)
    except (FileNotFoundError, NotADirectoryError, ValueError, StorageError) as error:
        print(f"{PROG} findings: {error}", file=sys.stderr)
        return 2
    print(as_json(found) if args.json else table(found))
    limit = severity_rank(args.fail_on)
    return 1 if any(severity_rank(f.severity) <= limit for f in found) else 0
