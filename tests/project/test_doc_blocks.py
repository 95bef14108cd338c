"""Every Python block of README.md and of each page of docs/ runs. A page's blocks run in
order, in one namespace, in a fresh folder: each page stands alone, as a reader copies it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tandv_tb import read_frame
from tests.helpers import REPO
from tests.helpers.trainers import scalars

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


def lightning_run(folder: Path) -> None:
    """The trainer's numerics lie in the run of its loss."""
    numerics = read_frame(folder / "runs" / "lightning", run="version_0")
    assert set(numerics["metadata", "step"]) == {0, 5}
    assert set(scalars(folder / "runs" / "lightning" / "version_0", "train_loss")) >= {0, 5}


def transformers_run(folder: Path) -> None:
    """The Trainer's numerics lie in the run of its own scalars, steps numbered as its loss."""
    (run,) = (folder / "hf_out" / "runs").iterdir()
    assert set(read_frame(run, run=".")["metadata", "step"]) == {5, 10}


def runs_written(*runs: str):
    def check(folder: Path) -> None:
        for run in runs:
            assert len(read_frame(folder / "runs" / run)), run

    return check


#: What a page's blocks leave behind (a page not named here only has to run).
WRITTEN = {
    "README.md": runs_written("quickstart", "jax_quickstart", "guarded"),
    "pytorch.md": runs_written("with_writer", "attach"),
    "lightning.md": lightning_run,
    "transformers.md": transformers_run,
    "jax.md": runs_written("jax_attach"),
    "writer.md": runs_written("by_hand"),
    "compiled.md": runs_written("compiled"),
}


def test_readme_holds_the_two_quickstarts_and_the_stop():
    assert len(python_blocks(REPO / "README.md")) == 3


@pytest.mark.parametrize(
    "page", [page for page in PAGES if python_blocks(page)], ids=lambda page: page.name
)
def test_a_pages_code_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": page.stem}
    for index, block in enumerate(python_blocks(page)):
        try:
            exec(compile(block, f"{page.name} block {index}", "exec"), namespace)
        except Exception as error:  # name the block that failed
            raise AssertionError(f"{page.name} python block {index} failed: {error!r}") from error
    WRITTEN.get(page.name, lambda folder: None)(tmp_path)


def test_every_page_that_writes_a_run_is_checked():
    """A page named in ``WRITTEN`` still exists and still has blocks."""
    with_blocks = {page.name for page in PAGES if python_blocks(page)}
    assert set(WRITTEN) <= with_blocks
