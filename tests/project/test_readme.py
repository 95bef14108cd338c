"""Every Python code block of README.md runs, in order, in a fresh folder."""

from __future__ import annotations

import re

from tandv_tb import read_frame
from tests.helpers import REPO
from tests.helpers.trainers import scalars

README = REPO / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_code_blocks():
    assert len(python_blocks()) >= 4


def test_readme_code_blocks_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    for index, block in enumerate(python_blocks()):
        try:
            exec(compile(block, f"README.md block {index}", "exec"), namespace)
        except Exception as error:  # name the block that failed
            raise AssertionError(f"README.md python block {index} failed: {error!r}") from error
    assert any((tmp_path / "runs").iterdir())
    # The trainer quickstarts' numerics lie in the run of their loss.
    lightning = read_frame(tmp_path / "runs" / "lightning", run="version_0")
    assert set(lightning["metadata", "step"]) == {0, 5}
    assert set(scalars(tmp_path / "runs" / "lightning" / "version_0", "train_loss")) >= {0, 5}
    (hf_run,) = (tmp_path / "hf_out" / "runs").iterdir()
    assert set(read_frame(hf_run, run=".")["metadata", "step"]) == {5, 10}
