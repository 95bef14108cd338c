"""The runs under a logdir and their event files: the one place the store lists files
and reads their bytes (names, sizes, a file's first bytes, a chunk of values from an
offset, byte ranges of stored vectors). The event files are never copied into the store;
a record's vector is read back from where it lies.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tandv_tb.disk.chunk_values import Chunk
from tandv_tb.disk.event_reader import event_files, event_runs, read_chunk
from tandv_tb.disk.record_columns import gather_ranges
from tandv_tb.disk.tag_table import TagTable


class RunFiles:
    """The event files of one run (a folder's own)."""

    def __init__(self, directory: Path):
        self.directory = directory

    def sizes(self) -> dict[str, int]:
        """``{name: size}`` of the run's event files now, by name."""
        return event_files(self.directory)

    def path(self, name: str) -> str:
        return str(self.directory / name)

    def head(self, name: str, size: int) -> bytes:
        """The first ``size`` bytes of a file (none where it cannot be read)."""
        try:
            with open(self.path(name), "rb") as file:
                return file.read(size)
        except OSError:
            return b""

    def chunk(self, name: str, offset: int, table: TagTable) -> Chunk:
        """The numerics values of a file from ``offset`` on (``event_reader.read_chunk``;
        the file may still grow)."""
        return read_chunk(self.path(name), offset, table, final=False)

    def read_ranges(
        self, name: str, at: np.ndarray, sizes: np.ndarray, out: np.ndarray, out_at: np.ndarray
    ) -> None:
        """Copy ``sizes[i]`` bytes of a file from ``at[i]`` into ``out`` at ``out_at[i]``;
        ``OSError`` or ``ValueError`` where the file is gone or shorter."""
        data = np.memmap(self.path(name), dtype=np.uint8, mode="r")
        gather_ranges(data, at, sizes, out=out, out_starts=out_at)


class Logdir:
    """The runs under a local logdir, named as TensorBoard names them ("." for the logdir
    itself)."""

    def __init__(self, root: str):
        self.root = root

    def runs(self) -> list[str]:
        """The folders holding event files now."""
        return sorted(event_runs(Path(self.root)))

    def is_run(self, run: str) -> bool:
        """Whether ``run`` is a folder of the logdir that holds event files now."""
        parts = run.split("/")
        if "\0" in run or (run != "." and any(part in ("", ".", "..") for part in parts)):
            return False  # not a name TensorBoard gives a run
        return bool(self.files(run).sizes())

    def files(self, run: str) -> RunFiles:
        root = Path(self.root)
        return RunFiles(root if run == "." else root.joinpath(*run.split("/")))
