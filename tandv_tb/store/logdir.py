"""The runs under a logdir and their event files: the one place the store lists files
and reads their bytes (names, sizes, a file's first bytes, a chunk of values from an
offset, byte ranges of stored vectors). The event files are never copied into the store;
a record's vector is read back from where it lies.

A logdir is what TensorBoard was given: one ``--logdir`` (a local folder, a ``file://``
URL, or any fsspec URL: ``s3://``, ``gs://``, ...; ``tandv_tb.filesystems.locations``), or a
``--logdir_spec`` of several, each perhaps with a group name. Runs are named as
TensorBoard names them: the folder's path relative to its logdir ("." for the logdir
itself), behind ``<group>/`` where the logdir has a group name (``os.path.join``'s rule, so
the logdir itself is ``<group>/.``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tandv_tb.event_files.chunk_values import Chunk
from tandv_tb.event_files.event_reader import CHUNK_BYTES, read_chunk
from tandv_tb.event_files.tag_table import TagTable
from tandv_tb.filesystems.locations import Files, Location, StorageError, location

#: Bytes of a run's first event file read to list its tags before the store reads it (a
#: tracker's first step of 1,000 tensors, each tag with its metadata, is about 250 KB).
FIRST_TAGS_BYTES = 256 << 10
#: Runs whose first tags are asked of remote storage at once.
FIRST_TAGS_REQUESTS = 8


class RunFiles:
    """The event files of one run (a folder's own)."""

    def __init__(self, where: Location, run: str):
        self.where = where  # the logdir it lies in
        self.run = run  # the folder's path relative to its logdir
        self.local = where.local  # reading costs no request

    def sizes(self) -> Files:
        """``{name: size}`` of the run's event files now, by name."""
        return self.where.files(self.run)

    def path(self, name: str) -> str:
        """The file's path or URL, for messages."""
        return self.where.join(self.run, name)

    def head(self, name: str, size: int) -> bytes:
        """The first ``size`` bytes of a file (none where a local file cannot be read;
        ``StorageError`` where remote storage fails)."""
        try:
            return self.where.source(self.run, name).read(0, size)
        except StorageError:
            raise
        except OSError:
            return b""

    def chunk(self, name: str, offset: int, table: TagTable, max_bytes: int | None = None) -> Chunk:
        """The numerics values of a file from ``offset`` on, about ``max_bytes`` (default
        ``CHUNK_BYTES``) of it (``event_reader.read_chunk``; the file may still grow)."""
        source = self.where.source(self.run, name)
        size = CHUNK_BYTES if max_bytes is None else max_bytes
        return read_chunk(source, offset, table, final=False, max_bytes=size)

    def first_tags(self) -> dict[str, tuple[bytes, int]]:
        """What listing the run's tags needs, ``{tag: (its metadata's plugin content, its
        last step)}``, read from the first ``FIRST_TAGS_BYTES`` (and at least the first
        whole event after the file's version) of its first event file (a tag's metadata is
        in its first record; the steps are those of that piece); none without files."""
        names = list(self.sizes())
        if not names:
            return {}
        table = TagTable()
        chunk = self.chunk(names[0], 0, table, FIRST_TAGS_BYTES)
        if not len(chunk) and chunk.end > 0:  # the version only: the next event whole
            chunk = self.chunk(names[0], chunk.end, table, FIRST_TAGS_BYTES)
        last = np.zeros(len(table), dtype=np.int64)
        np.maximum.at(last, chunk.tags, chunk.steps)
        return {
            name: (content, int(step))
            for name, content, step in zip(table.names, table.contents, last.tolist())
        }

    def read_ranges(
        self, name: str, at: np.ndarray, sizes: np.ndarray, out: np.ndarray, out_at: np.ndarray
    ) -> None:
        """Copy ``sizes[i]`` bytes of a file from ``at[i]`` into ``out`` at ``out_at[i]``;
        ``OSError`` or ``ValueError`` where the file is gone or shorter."""
        self.where.read_ranges(self.run, name, at, sizes, out, out_at)


class Logdir:
    """The runs under one logdir or the logdirs of a ``--logdir_spec`` (``roots``: group
    name or None, and where it lies), named as TensorBoard names them."""

    def __init__(self, roots: list[tuple[str | None, Location]]):
        self.roots = roots
        keys = [where.key if name is None else f"{name}={where.key}" for name, where in roots]
        self.key = keys[0] if len(roots) == 1 and roots[0][0] is None else "spec:" + ",".join(keys)
        self.root = ",".join(where.url for _, where in roots)  # for messages
        self.local = all(where.local for _, where in roots)

    @classmethod
    def of(cls, logdir: str | os.PathLike) -> Logdir:
        """One logdir, a path or a URL."""
        return cls([(None, location(logdir))])

    @classmethod
    def from_spec(cls, spec: str) -> Logdir:
        """The logdirs of a ``--logdir_spec`` (``name:path,path2,...``), split by
        TensorBoard's own rule."""
        from tensorboard.backend.event_processing import data_ingester

        # Private, pinned by tests/project/test_private_api_pins.py: the one definition of
        # how TensorBoard splits a spec (names, URLs, Windows drives, colons in paths).
        parsed = data_ingester._parse_event_files_spec(spec)
        return cls([(name, location(path)) for path, name in parsed.items()])

    def exists(self) -> bool:
        """Whether some logdir of it exists (``StorageError`` where one cannot be asked)."""
        return any(where.exists() for _, where in self.roots)

    def runs(self) -> list[str]:
        """The folders holding event files now (``StorageError`` where a logdir cannot be
        listed)."""
        found = []
        for name, where in self.roots:
            found += [_named(name, run) for run in where.runs()]
        return sorted(dict.fromkeys(found))

    def is_run(self, run: str) -> bool:
        """Whether ``run`` is a folder of the logdir that holds event files now."""
        found = self._find(run)
        return found is not None and bool(found.sizes())

    def files(self, run: str) -> RunFiles:
        found = self._find(run)
        return found if found is not None else RunFiles(self.roots[0][1], run)

    def _find(self, run: str) -> RunFiles | None:
        """The run's files in the first logdir whose runs it can be one of."""
        if "\0" in run:
            return None
        for name, where in self.roots:
            relative = _relative(name, run)
            if relative is None:
                continue
            parts = relative.split("/")
            if relative != "." and any(part in ("", ".", "..") for part in parts):
                continue  # not a name TensorBoard gives a run
            files = RunFiles(where, relative)
            if len(self.roots) == 1 or files.sizes():
                return files
        return None


def first_tags_of(runs: list[RunFiles]) -> list[dict[str, tuple[bytes, int]] | OSError]:
    """``RunFiles.first_tags`` of each run (an ``OSError`` where it failed), of remote
    runs ``FIRST_TAGS_REQUESTS`` at a time (a request each)."""

    def first_tags(files: RunFiles) -> dict[str, tuple[bytes, int]] | OSError:
        try:
            return files.first_tags()
        except OSError as error:
            return error

    if all(files.local for files in runs):
        return [first_tags(files) for files in runs]
    with ThreadPoolExecutor(FIRST_TAGS_REQUESTS) as requests:
        return list(requests.map(first_tags, runs))


def _named(group: str | None, run: str) -> str:
    """A run's name under a logdir of a group (TensorBoard's ``os.path.join(name, rpath)``)."""
    return run if group is None else f"{group}/{run}"


def _relative(group: str | None, run: str) -> str | None:
    """The run's path relative to a logdir of the group, None where it is no run of it."""
    if group is None:
        return run
    return run[len(group) + 1 :] if run.startswith(group + "/") else None
