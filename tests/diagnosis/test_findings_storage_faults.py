"""``tandv-tb findings`` where storage fails at real faults: a logdir URL whose fsspec
filesystem cannot be made exits 2 with one line naming what to install or the error; a
cache folder that is full gives the same findings from a temporary store, with one
warning. The extras the messages name install the protocols' packages."""

from __future__ import annotations

import pytest
import tomllib

from tests.helpers import REPO
from tests.helpers.fault_filesystems import site_environment, unopenable
from tests.helpers.findings_cli import cli
from tests.helpers.s3_server import environment
from tests.helpers.store_faults import fill, small_tmpfs
from tests.helpers.store_runs import write_run


@pytest.mark.parametrize(("url", "named"), unopenable())
def test_a_logdir_whose_filesystem_cannot_be_made_exits_2_with_one_line(url, named):
    with environment(site_environment()):
        done = cli("findings", url)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"tandv-tb findings: cannot read {url}: ") and named in line, line


def test_a_full_cache_folder_gives_the_same_findings(tmp_path):
    write_run(tmp_path / "logs" / "r", range(12), nan_at=7)
    (tmp_path / "tmp").mkdir()
    with environment({"XDG_CACHE_HOME": str(tmp_path / "writable")}):
        alone = cli("findings", str(tmp_path / "logs"), "--json")
    assert alone.returncode == 1 and '"step": 7' in alone.stdout, alone.stderr
    with small_tmpfs(tmp_path / "full") as full:
        fill(full)
        variables = {"XDG_CACHE_HOME": str(full), "TMPDIR": str(tmp_path / "tmp")}
        with environment(variables):
            done = cli("findings", str(tmp_path / "logs"), "--json")
    assert (done.returncode, done.stdout) == (1, alone.stdout)
    (warning,) = done.stderr.splitlines()
    for words in (str(full / "tandv_tb"), "No space left on device", "--tandv_cache_dir"):
        assert words in warning, warning
    assert not list((tmp_path / "tmp").iterdir())  # the temporary store is deleted


def test_each_extra_named_installs_its_protocols_package():
    from fsspec.registry import known_implementations

    from tandv_tb.filesystems.fsspec_packages import EXTRAS

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for protocol, extra in EXTRAS.items():
        package = known_implementations[protocol]["class"].partition(".")[0]
        assert any(need.startswith(package) for need in extras[extra]), (protocol, extra)
