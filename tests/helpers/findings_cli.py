"""The ``tandv-tb findings`` command line run as a process, as a user runs it."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO


def _command() -> list[str]:
    """The installed ``tandv-tb`` console script, else the same ``main`` through ``-m``."""
    scripts = [
        ep
        for ep in importlib.metadata.entry_points(group="console_scripts")
        if ep.name == "tandv-tb"
    ]
    script = Path(sys.executable).with_name("tandv-tb")
    if scripts and script.exists() and scripts[0].value == "tandv_tb.diagnosis.cli:main":
        return [str(script)]
    return [sys.executable, "-m", "tandv_tb"]


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [*_command(), *args], capture_output=True, text=True, env=env, timeout=300
    )


def cli_json(logdir: Path, *args: str) -> tuple[int, list[dict]]:
    """The exit status and the JSON list (``--all`` among ``args``: one row per finding)."""
    done = cli("findings", str(logdir), "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)
