"""``tandv-tb findings`` on a logdir in object storage (a local S3 server): the same
findings as from a local copy; storage it cannot read exits 2 with one line naming it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.s3_server import environment, unreachable_endpoint
from tests.helpers.s3_server import s3 as s3  # noqa: F401 (the fixture)
from tests.helpers.store_runs import write_run

pytestmark = pytest.mark.slow  # new processes, each importing the store


def _cli(*args: str) -> subprocess.CompletedProcess:
    script = "import sys; from tandv_tb.diagnosis.cli import main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", script, *args]
    return subprocess.run(command, capture_output=True, text=True, env=os.environ, timeout=300)


def test_findings_of_an_s3_logdir_are_those_of_its_local_copy(s3, tmp_path):
    write_run(tmp_path / "logs" / "r", range(12), nan_at=7)
    url = s3.bucket("found") + "/logs"
    s3.upload(tmp_path / "logs", url)
    remote = _cli("findings", url, "--json")
    local = _cli("findings", str(tmp_path / "logs"), "--json")
    assert remote.returncode == local.returncode == 1, remote.stderr
    assert remote.stdout == local.stdout and '"kind": "nonfinite"' in remote.stdout


def test_storage_it_cannot_read_exits_2_with_one_line(s3):
    missing = _cli("findings", "s3://no-such-bucket/logs")
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        .splitlines()[-1]
        .startswith("tandv-tb findings: no such log directory: 's3://no-such-bucket/logs'")
        or "not found" in missing.stderr
    )
    with environment({"AWS_ENDPOINT_URL": unreachable_endpoint(), "S3_ENDPOINT": ""}):
        away = _cli("findings", "s3://away/logs")
    assert away.returncode == 2
    assert "cannot read s3://away/logs: the storage cannot be reached" in away.stderr
