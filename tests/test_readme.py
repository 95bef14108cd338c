"""Every Python code block of README.md runs, in order, in a fresh folder."""

from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


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
