"""The numerics values read from one piece of an event file, as flat arrays (``Chunk``)."""

from __future__ import annotations

import dataclasses

import numpy as np
from tensorboard.compat.proto import types_pb2

from tandv_tb.event_files.graph_record import GraphRecord, read_graph_value
from tandv_tb.event_files.metadata import GRAPH_KIND, NONFINITE_KIND, PLUGIN_NAME
from tandv_tb.event_files.nonfinite_record import NonfiniteEntry, decode_nonfinite, stopped_at
from tandv_tb.event_files.summary import encode_varints, stored_vector
from tandv_tb.event_files.tag_table import TagTable
from tandv_tb.filesystems.ranges import gather_ranges

_TAG_PREFIX = f"{PLUGIN_NAME}/"
_SCALARS_PLUGIN = "scalars"


@dataclasses.dataclass
class Chunk:
    """The numerics values read from one file between two offsets, in file order.

    Value i is tag ``tags[i]`` (an index into the run's ``TagTable``) at ``steps[i]``; its
    stored vector (varint bytes, see ``tandv_tb.event_files.summary``) is the next
    ``sizes[i]`` bytes of ``contents``, or absent (``sizes[i] == -1``) when its tensor is
    not a stored vector. The same bytes lie at ``file_offsets[i]`` in the file, except for a
    vector that was re-encoded (an old version's; -1)."""

    end: int  # the offset up to which the file was read
    tags: np.ndarray  # int32[V]
    steps: np.ndarray  # int64[V]
    wall_times: np.ndarray  # float64[V]
    sizes: np.ndarray  # int64[V]
    contents: np.ndarray  # uint8[sum of the non-negative sizes]
    file_offsets: np.ndarray  # int64[V]: where each value's bytes lie in the file, -1: nowhere
    problems: list[str]
    # (step, entries, stopped) of the watch: ``nonfinite_record``
    nonfinite: list[tuple[int, list[NonfiniteEntry], bool]]
    scalars: list[tuple[str, int, float, float]]  # TensorBoard scalars: tag, step, time, value
    graphs: list[GraphRecord] = dataclasses.field(default_factory=list)  # the model's graph

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def offsets(self) -> np.ndarray:
        """Where each value's bytes start in ``contents``."""
        return np.concatenate(([0], np.cumsum(np.maximum(self.sizes, 0))[:-1])).astype(np.int64)


class ChunkValues:
    """The numerics values of a chunk, turned into arrays at the end in file order (by the
    event each came from): taken from the scan (byte ranges of ``buffer``, many events at
    once) or from protobuf (bytes of their own, one event at a time, ``event``)."""

    def __init__(self, buffer: np.ndarray, file_offset: int) -> None:
        self.buffer = buffer
        self.file_offset = file_offset  # where ``buffer`` starts in the file
        self.event = 0  # the event being parsed with protobuf (its index in the chunk)
        #: (events, tags, steps, walls, starts, sizes) of values, per value
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.extra: list[bytes] = []  # contents of values parsed with protobuf
        self.extra_size = 0
        self.nonfinite: list[tuple[int, list[NonfiniteEntry], bool]] = []
        self.scalars: list[tuple[str, int, float, float]] = []
        self.graphs: list[GraphRecord] = []

    def add_fast(self, events, tags, steps, walls, starts, sizes) -> None:
        """Values found by the scan: per value its event, tag, step, wall time and where
        its vector lies in ``buffer``."""
        if len(tags):
            self.parts.append((events, tags, steps, walls, starts, sizes))

    def _add_parsed(self, index: int, step: int, wall_time: float, content: bytes | None):
        start = len(self.buffer) + self.extra_size
        size = -1 if content is None else len(content)
        if content is not None:
            self.extra.append(content)
            self.extra_size += len(content)
        one = np.array
        self.parts.append(
            (
                one([self.event]),
                one([index]),
                one([step], np.int64),
                one([wall_time]),
                one([start]),
                one([size]),
            )
        )

    def add_event(
        self, event, table: TagTable, path: str, problems: list[str], later: frozenset = frozenset()
    ) -> None:
        """The values of an event parsed with protobuf; tags in ``later`` were registered
        by a later event of the chunk, so are not known yet here."""
        for value in event.summary.value:
            index = None if value.tag in later else table.index(value.tag)
            if index is None and value.HasField("metadata"):
                plugin = value.metadata.plugin_data
                if plugin.plugin_name != PLUGIN_NAME:
                    if plugin.plugin_name == _SCALARS_PLUGIN:
                        table.scalar_tags.add(value.tag)
                    self.add_scalar(value, table, event)
                    continue
                index = table.add(value.tag, plugin.content)
            if index is None and not value.tag.startswith(_TAG_PREFIX):
                self.add_scalar(value, table, event)
                continue
            if index is None:
                if value.tag.startswith(_TAG_PREFIX) and table.refuse_once(value.tag):
                    problems.append(
                        f"{path}: skipped the records of tag {value.tag!r} from step "
                        f"{event.step}: its metadata (in the tag's first record) was not read"
                    )
                continue
            if table.infos[index] is None:
                if value.tag in table.kinds:
                    kind, content = table.kinds[value.tag], table.contents[index]
                    self.add_other(value, kind, content, event.step, path, problems)
                elif table.refuse_once(value.tag):
                    error = table.errors[value.tag]
                    problems.append(f"{path}: skipped the records of tag {value.tag!r}: {error}")
                continue
            content = _stored_bytes(value.tensor)
            self._add_parsed(index, event.step, event.wall_time, content)

    def add_scalar(self, value, table: TagTable, event) -> None:
        """A TensorBoard scalar (the loss, the learning rate) is kept; anything else not."""
        if value.WhichOneof("value") == "simple_value":
            number = value.simple_value
        elif value.tag in table.scalar_tags and not value.tensor.tensor_shape.dim:
            try:
                number = float(_make_ndarray(value.tensor))
            except (TypeError, ValueError):
                return
        else:
            return
        self.scalars.append((value.tag, event.step, event.wall_time, number))

    def add_other(
        self, value, kind: str | None, content: bytes, step: int, path: str, problems: list[str]
    ) -> None:
        """A value of a tag of this plugin that holds no numerics (``kind`` and ``content``
        of its tag's plugin data): the watch's and the graph's are kept."""
        if kind == GRAPH_KIND:
            if value.HasField("metadata"):  # each graph value says its own version
                content = value.metadata.plugin_data.content
            found = read_graph_value(value.tensor, content, step)
            self.graphs.append(found)
            if found.problem is not None:
                problems.append(f"{path}: skipped the graph record of step {step}: {found.problem}")
            return
        if kind != NONFINITE_KIND:
            return
        try:
            self.nonfinite.append((step, decode_nonfinite(value.tensor), stopped_at(value)))
        except ValueError as error:
            problems.append(
                f"{path}: skipped a malformed record of {value.tag!r} at step {step}: {error}"
            )

    def chunk(self, end: int, problems: list[str]) -> Chunk:
        if self.parts:
            events, tags, steps, walls, starts, sizes = (
                np.concatenate(c) for c in zip(*self.parts)
            )
            if len(self.parts) > 1 and (np.diff(events) < 0).any():
                order = np.argsort(events, kind="stable")
                tags, steps, walls, starts, sizes = (
                    c[order] for c in (tags, steps, walls, starts, sizes)
                )
        else:
            tags, steps, walls, starts, sizes = (np.zeros(0, np.int64) for _ in range(5))
        source = self.buffer
        if self.extra:
            source = np.concatenate([source, np.frombuffer(b"".join(self.extra), np.uint8)])
        whole = sizes >= 0
        in_file = starts < len(self.buffer)
        return Chunk(
            end=end,
            tags=tags.astype(np.int32),
            steps=steps.astype(np.int64),
            wall_times=walls.astype(np.float64),
            sizes=sizes.astype(np.int64),
            contents=gather_ranges(source, starts[whole], sizes[whole]),
            file_offsets=np.where(in_file & whole, starts + self.file_offset, -1).astype(np.int64),
            problems=problems,
            nonfinite=self.nonfinite,
            scalars=self.scalars,
            graphs=self.graphs,
        )


def _stored_bytes(tensor) -> bytes | None:
    """The varint bytes of a stored vector: ``tensor_content`` of a version-2 tensor as is,
    any other 1-D integer vector (version 1) encoded; None for anything else."""
    dims = tensor.tensor_shape.dim
    if (
        tensor.dtype == types_pb2.DT_UINT8
        and len(dims) == 1
        and dims[0].size == len(tensor.tensor_content)
    ):
        return tensor.tensor_content
    if len(dims) != 1 or not 0 <= dims[0].size <= max(tensor.ByteSize(), 1):
        return None  # refused before make_ndarray could allocate a huge array
    try:
        return encode_varints(stored_vector(_make_ndarray(tensor)))
    except (TypeError, ValueError):
        return None


def _make_ndarray(tensor) -> np.ndarray:
    """TensorBoard's ``make_ndarray``, imported on first use: its module loads
    TensorBoard's TensorFlow stub (about 0.1 s), which reading a built store never needs."""
    from tensorboard.util import tensor_util

    return tensor_util.make_ndarray(tensor)
