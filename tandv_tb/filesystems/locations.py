"""Where event files lie: a local folder, or any URL fsspec opens (``s3://``, ``gs://``,
``abfs://``, ``hdfs://``, ...), for every reader (the store, ``read_frame``) and writer.

A logdir is given as TensorBoard takes it: a path, or a URL (``scheme://...``). A local path
and a ``file://`` URL are read with the operating system (no fsspec: a local read must stay
as fast as it was); any other URL through fsspec, imported only then. Credentials are found
where the storage's own SDK looks (for S3: the environment, ``~/.aws``, instance roles;
for GCS: ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's files), and fsspec's own
configuration applies (``~/.config/fsspec/*.json``, ``FSSPEC_<PROTOCOL>_<OPTION>``
variables); nothing here reads, keeps or prints a credential, and a URL is shown without
its user part and query. For S3, ``S3_ENDPOINT`` (TensorBoard's own variable for an S3
server other than AWS) is honoured where no other endpoint is configured, so the plugin
reads the server TensorBoard reads.

Failures of storage become ``StorageError``: one sentence naming the URL and what went
wrong (denied, missing, unreachable), for the tab and the command line.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import urllib.parse
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from tandv_tb.filesystems.fsspec_packages import missing_package
from tandv_tb.filesystems.ranges import ByteSource, LocalBytes, gather_ranges

#: A URL as TensorBoard tells one from a path (``data_ingester._parse_event_files_spec``).
_URL = re.compile(r"[a-zA-Z][0-9a-zA-Z.]*://")
#: Gaps between two byte ranges of one object below which both are fetched as one request.
RANGE_GAP = 1 << 16


def is_url(text: str) -> bool:
    """Whether ``text`` is a URL (``scheme://...``) rather than a path."""
    return _URL.match(text) is not None


def is_event_file(name: str) -> bool:
    """Whether a file of this name is an event file: its name holds "tfevents", as
    TensorBoard decides (a run is a folder that holds event files of its own)."""
    return "tfevents" in name


def public_url(url: str) -> str:
    """``url`` without what may hold a secret (a user part ``user:password@``, a query
    ``?sig=...``), to show in messages."""
    if not is_url(url):
        return url
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


class StorageError(OSError):
    """A logdir's storage could not be read or written: ``kind`` is ``denied``,
    ``missing``, ``unreachable`` or ``failed``; the message is one sentence for users."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind

    def __reduce__(self):  # pickled whole (from the store's reader process)
        return type(self), (str(self), self.kind)


def storage_error(url: str, error: BaseException, doing: str = "read") -> StorageError:
    """``error`` of an fsspec call on ``url`` as a ``StorageError`` with a clear message
    (the storage's own message kept, never a credential: SDKs do not put them in errors)."""
    if isinstance(error, StorageError):
        return error
    where = public_url(url)
    name = type(error).__name__
    detail = str(error).strip() or name
    if isinstance(error, PermissionError) or name in _DENIED:
        kind, what = "denied", f"access denied ({detail}); check the credentials"
    elif isinstance(error, FileNotFoundError) or name in _MISSING:
        kind, what = "missing", f"not found ({detail})"
    elif name in _UNREACHABLE or isinstance(error, (ConnectionError, TimeoutError)):
        kind, what = "unreachable", f"the storage cannot be reached ({detail})"
    else:
        kind, what = "failed", f"{name}: {detail}"
    return StorageError(f"cannot {doing} {where}: {what}", kind)


_DENIED = {"NoCredentialsError", "PartialCredentialsError", "Forbidden", "Unauthorized"}
_MISSING = {"NoSuchBucket", "NoSuchKey"}
_UNREACHABLE = {
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionClosedError",
    "ClientConnectorError",
    "ServerDisconnectedError",
    "ServerTimeoutError",
}


#: Event files of one run folder: ``{name: size}``, by name.
Files = dict[str, int]


class Location:
    """A folder of event files, local or remote: its runs (folders holding event files,
    named by their path relative to it, "." for itself), their files and their bytes."""

    url: str  # as given
    key: str  # what tells this location from every other (the store's database is per key)
    local: bool  # a local folder: read with no request, files appended to (``location``)

    def exists(self) -> bool:
        raise NotImplementedError

    def runs(self) -> dict[str, Files]:
        """Every run under the location now, by name (``StorageError`` where it cannot be
        listed; a missing local folder has none)."""
        raise NotImplementedError

    def files(self, run: str) -> Files:
        """The event files of one run now (none where the folder is missing)."""
        raise NotImplementedError

    def source(self, run: str, name: str) -> ByteSource:
        raise NotImplementedError

    def read_ranges(
        self,
        run: str,
        name: str,
        at: np.ndarray,
        sizes: np.ndarray,
        out: np.ndarray,
        out_at: np.ndarray,
    ) -> None:
        """Copy ``sizes[i]`` bytes of a file from ``at[i]`` into ``out`` at ``out_at[i]``;
        ``OSError`` or ``ValueError`` where the file is gone or shorter."""
        raise NotImplementedError

    def join(self, *parts: str) -> str:
        """The path or URL of ``parts`` under the location (for messages and writers)."""
        raise NotImplementedError


class LocalFolder(Location):
    """A local folder, read with the operating system."""

    local = True

    def __init__(self, path: str):
        self.url = path
        self.root = os.path.expanduser(path)
        self.key = os.path.realpath(self.root)

    def exists(self) -> bool:
        return os.path.isdir(self.root)

    def runs(self) -> dict[str, Files]:
        found: dict[str, Files] = {}
        for directory, subdirs, names in os.walk(self.root):
            subdirs.sort()
            events = sorted(name for name in names if is_event_file(name))
            if events:  # a file that cannot be read is listed: its reader says why
                run = os.path.relpath(directory, self.root).replace(os.sep, "/")
                found[run] = {name: _size(os.path.join(directory, name)) for name in events}
        return found

    def files(self, run: str) -> Files:
        found = {}
        with contextlib.suppress(OSError), os.scandir(self._folder(run)) as entries:
            for entry in entries:
                if is_event_file(entry.name):
                    with contextlib.suppress(OSError):
                        if entry.is_file():
                            found[entry.name] = entry.stat().st_size
        return dict(sorted(found.items()))

    def source(self, run: str, name: str) -> LocalBytes:
        return LocalBytes(self.join(run, name))

    def read_ranges(self, run, name, at, sizes, out, out_at) -> None:
        data = np.memmap(self.join(run, name), dtype=np.uint8, mode="r")
        gather_ranges(data, at, sizes, out=out, out_starts=out_at)

    def join(self, *parts: str) -> str:
        return os.path.join(self._folder(parts[0]), *parts[1:]) if parts else self.root

    def _folder(self, run: str) -> str:
        return self.root if run == "." else os.path.join(self.root, *run.split("/"))


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class RemoteFolder(Location):
    """A folder behind an fsspec URL. Listings are asked of the storage each time (fsspec's
    listing cache is dropped first), bytes are read by range: an update reads only what is
    new."""

    local = False

    def __init__(self, url: str):
        self.url = url
        self.fs, path = filesystem(url)
        self.root = path.rstrip("/")
        self._sources: dict[str, RemoteBytes] = {}
        self._lock = threading.Lock()
        self.key = f"{public_url(url).rstrip('/')}@{_endpoint(url)}"

    def exists(self) -> bool:
        return self._call(lambda: self.fs.isdir(self.root))

    def runs(self) -> dict[str, Files]:
        def listing():
            self.fs.invalidate_cache(self.root)
            return self.fs.find(self.root, detail=True)

        found: dict[str, Files] = {}
        for path, info in sorted(self._call(listing).items()):
            folder, _, name = path.rpartition("/")
            if is_event_file(name) and info.get("type", "file") == "file":
                run = self._relative(folder)
                if run is not None:
                    found.setdefault(run, {})[name] = int(info.get("size") or 0)
        return found

    def files(self, run: str) -> Files:
        folder = self._folder(run)

        def listing():
            self.fs.invalidate_cache(folder)
            return self.fs.ls(folder, detail=True)

        try:
            entries = self._call(listing)
        except StorageError as error:
            if error.kind == "missing":
                return {}
            raise
        found = {}
        for info in entries:
            name = info["name"].rstrip("/").rpartition("/")[2]
            if is_event_file(name) and info.get("type") == "file":
                found[name] = int(info.get("size") or 0)
        return dict(sorted(found.items()))

    def source(self, run: str, name: str) -> RemoteBytes:
        """The object's bytes; the same reader for the same object (its read-ahead is
        used by the next read)."""
        path = f"{self._folder(run)}/{name}"
        with self._lock:
            found = self._sources.get(path)
            if found is None:
                if len(self._sources) > 256:
                    self._sources.clear()
                found = self._sources[path] = RemoteBytes(self, path)
        return found

    def read_ranges(self, run, name, at, sizes, out, out_at) -> None:
        """Nearby ranges are fetched together (fsspec's ``merge_offset_ranges``, gaps up to
        ``RANGE_GAP``), the requests concurrently where the filesystem can (``cat_ranges``)."""
        from fsspec.utils import merge_offset_ranges

        if not len(at):
            return
        path = f"{self._folder(run)}/{name}"
        starts, ends = at.tolist(), (at + sizes).tolist()
        _, block_starts, block_ends = merge_offset_ranges(
            [path] * len(starts), starts, ends, max_gap=RANGE_GAP, sort=True
        )
        blocks = self._call(
            lambda: self.fs.cat_ranges([path] * len(block_starts), block_starts, block_ends)
        )
        block_at = np.asarray(block_starts, dtype=np.int64)
        which = np.searchsorted(block_at, at, side="right") - 1
        for i, block in enumerate(which.tolist()):
            data = blocks[block]
            if isinstance(data, BaseException):
                raise storage_error(self.join(run, name), data)
            begin = int(at[i]) - block_starts[block]
            piece = data[begin : begin + int(sizes[i])]
            if len(piece) != sizes[i]:
                raise ValueError(f"{public_url(self.join(run, name))} is shorter than its records")
            out[out_at[i] : out_at[i] + sizes[i]] = np.frombuffer(piece, dtype=np.uint8)

    def join(self, *parts: str) -> str:
        base = self.url.rstrip("/")
        if parts and parts[0] == ".":
            parts = parts[1:]
        return "/".join([base, *parts])

    def _folder(self, run: str) -> str:
        return self.root if run == "." else f"{self.root}/{run}"

    def _relative(self, folder: str) -> str | None:
        if folder == self.root:
            return "."
        if folder.startswith(self.root + "/"):
            return folder[len(self.root) + 1 :]
        return None

    def _call(self, call: Callable):
        try:
            return call()
        except Exception as error:  # an SDK's own error types: named in the message
            raise storage_error(self.url, error) from None


class RemoteBytes:
    """An object's bytes read by range requests (``cat_file`` with start and end). Reads
    of ``READ_AHEAD_MIN`` bytes or more fetch the next range of the same size meanwhile
    (a file is read piece after piece: the next piece's request overlaps the decoding of
    this one); a fetched range is used only where it came back whole (a file that was
    shorter then may have grown since). Only a read that did not reach the end keeps its
    bytes and the next range (two pieces) for the read after it."""

    def __init__(self, folder: RemoteFolder, path: str):
        self._folder = folder
        self._path = path
        self.name = folder.fs.unstrip_protocol(path)
        self._lock = threading.Lock()
        self._held: tuple[int, bytes] | None = None  # the last range read: (start, bytes)
        self._ahead: tuple[int, int, Future] | None = None  # (start, size, its fetch)

    def read(self, offset: int, size: int) -> bytes:
        with self._lock:
            data = self._from_ahead(offset, size)
            if data is None:
                data = self._fetch(offset, size)
            self._held, self._ahead = None, None  # nothing held past a read but the last
            if size >= READ_AHEAD_MIN and len(data) == size:  # not at the end: go on
                start = offset + size
                self._held = (offset, data)
                self._ahead = (start, size, _PREFETCH.submit(self._fetch, start, size))
            return data

    def _from_ahead(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes from ``offset`` out of the last range read and the one fetched
        after it, where they hold them."""
        if self._held is None or self._ahead is None:
            return None
        held_at, held = self._held
        start, ahead_size, fetch = self._ahead
        if not held_at <= offset <= start or start != held_at + len(held):
            return None
        try:
            more = fetch.result()
        except StorageError:
            return None
        if len(more) < ahead_size and offset + size > start + len(more):
            return None  # it came back short: read again (the file may have grown)
        data = held[offset - held_at :] + more
        return data[:size] if len(data) >= size else None

    def _fetch(self, offset: int, size: int) -> bytes:
        try:
            return self._folder.fs.cat_file(self._path, start=offset, end=offset + size)
        except Exception as error:
            if _past_the_end(error):
                return b""
            raise storage_error(self.name, error) from None


#: Reads from this size on fetch the next range meanwhile (``RemoteBytes``).
READ_AHEAD_MIN = 1 << 20
_PREFETCH = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tandv_tb-read-ahead")


def _past_the_end(error: BaseException) -> bool:
    """Whether a range read failed only because it starts at or after the end (HTTP 416)."""
    text = f"{type(error).__name__} {error}".lower()
    return "invalidrange" in text or "416" in text or "not satisfiable" in text


def filesystem(url: str):
    """``(fsspec filesystem, path)`` of a URL, with TensorBoard's ``S3_ENDPOINT`` applied to
    S3 where nothing else names an endpoint."""
    import fsspec
    import fsspec.config

    options: dict = {"skip_instance_cache": True}  # a cached one may hold older settings
    protocol = url.split("://", 1)[0].lower()
    endpoint = os.environ.get("S3_ENDPOINT")
    if protocol in ("s3", "s3a") and endpoint and _endpoint(url) == endpoint:
        configured = fsspec.config.conf.get("s3", {})
        if "endpoint_url" not in configured and "endpoint_url" not in configured.get(
            "client_kwargs", {}
        ):
            options["endpoint_url"] = endpoint
    try:
        return fsspec.core.url_to_fs(url, **options)
    except ImportError as error:  # the protocol's package is not installed
        what = missing_package(protocol, error)
        raise StorageError(f"cannot read {public_url(url)}: {what}", "failed") from None
    except Exception as error:  # the filesystem refused to be made (an option too new, ...)
        raise storage_error(url, error) from None


def _endpoint(url: str) -> str:
    """The S3 endpoint a URL is read from where one is configured ("" for the default):
    part of what tells two logdirs of the same bucket name apart."""
    if url.split("://", 1)[0].lower() not in ("s3", "s3a"):
        return ""
    for variable in ("FSSPEC_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(variable):
            return os.environ[variable]
    return os.environ.get("S3_ENDPOINT", "")


def is_local(logdir: str | os.PathLike) -> bool:
    """Whether ``logdir`` is a local folder (a path, or a ``file://`` URL): the one
    local-or-remote rule, for ``location`` and the writers."""
    text = os.fspath(logdir)
    return text.startswith("file://") or not is_url(text)


def location(logdir: str | os.PathLike) -> Location:
    """The ``Location`` of a path or URL (``is_local``)."""
    text = os.fspath(logdir)
    if not is_local(text):
        return RemoteFolder(text)
    if text.startswith("file://"):
        text = urllib.parse.unquote(urllib.parse.urlsplit(text).path) or "/"
    return LocalFolder(text)
