"""Reading every stored step of some tags from the data provider, as flat int64 arrays.

The provider's public ``read_tensors`` turns each step into an ndarray with
``tensor_util.make_ndarray``, tens of microseconds a step: 200 layers x 1,000 steps take
many seconds. With TensorBoard's data server (``--load_fast``, the default loader) the same
``ReadTensors`` request is sent on the provider's own gRPC stub (in chunks, in parallel)
and the stored vectors of all steps are gathered in one pass (the varint bytes of plugin
data version 2 joined and decoded at once, or the ``int64_val`` of version 1), several times
faster. With the Python loader each tag's events are read from its multiplexer (what its
``read_tensors`` reads), so that one damaged step cannot fail the whole read; any other
provider goes through the public API. All give the same ``RawSeries``;
``tests/test_plugin_reading.py`` checks that.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import operator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tensorboard.compat.proto import types_pb2
from tensorboard.data import provider as tb_provider
from tensorboard.util import tensor_util

from tandv_tb.summary import decode_varint_parts, stored_vector

logger = logging.getLogger(__name__)

#: Ask the provider for every step it holds (it holds what ``--samples_per_plugin`` keeps).
ALL_SAMPLES = 1 << 40
#: Tags per ``ReadTensors`` call, and calls in flight at once.
GRPC_CHUNK = 25
GRPC_THREADS = 3


@dataclasses.dataclass
class RawSeries:
    """The stored steps of one tag: value i is ``flat[offsets[i]:offsets[i] + lengths[i]]``;
    ``lengths[i] == -1`` marks a value that is not a stored vector (not a 1-D integer vector,
    or broken varint bytes)."""

    steps: np.ndarray  # int64[S]
    wall_times: np.ndarray  # float64[S]
    lengths: np.ndarray  # int64[S]
    flat: np.ndarray  # int64[sum of the non-negative lengths]


def read_raw(provider, ctx, experiment_id: str, plugin_name: str, run: str, tags: list[str]):
    """``{tag: RawSeries}`` for the given tags of one run (missing tags are left out)."""
    stub = getattr(provider, "_stub", None)
    if stub is not None and hasattr(stub, "ReadTensors"):
        try:
            return _read_grpc(stub, experiment_id, plugin_name, run, tags)
        except Exception as error:  # an unexpected stub or TensorBoard version
            logger.warning("fast tensor read failed (%s); using read_tensors", error)
    if hasattr(getattr(provider, "_multiplexer", None), "Tensors"):  # the Python loader
        found = {}
        for tag in tags:
            found.update(_read_events(provider, run, tag))
        return found
    return _read_public(provider, ctx, experiment_id, plugin_name, run, tags)


def _read_public(provider, ctx, experiment_id: str, plugin_name: str, run: str, tags: list[str]):
    data = provider.read_tensors(
        ctx,
        experiment_id=experiment_id,
        plugin_name=plugin_name,
        downsample=ALL_SAMPLES,
        run_tag_filter=tb_provider.RunTagFilter(runs=[run], tags=tags),
    ).get(run, {})
    return {
        tag: from_arrays(
            [p.step for p in points], [p.wall_time for p in points], [p.numpy for p in points]
        )
        for tag, points in data.items()
    }


def _read_events(provider, run: str, tag: str) -> dict:
    """One tag's steps from the Python loader's multiplexer (what its ``read_tensors`` reads),
    one guarded ``make_ndarray`` each, so that a damaged step is left out alone instead of
    failing the whole read; ``{}`` when the multiplexer does not hold the tag."""
    try:
        events = provider._multiplexer.Tensors(run, tag)
    except KeyError:
        return {}
    steps, wall_times, arrays = [], [], []
    for event in events:
        steps.append(event.step)
        wall_times.append(event.wall_time)
        arrays.append(_ndarray(event.tensor_proto))
    return {tag: from_arrays(steps, wall_times, arrays)}


def _ndarray(tensor) -> np.ndarray:
    """``make_ndarray``, or an empty 2-D array (not a stored vector) for a step it refuses
    or whose shape no stored vector has (refused before ``make_ndarray`` could allocate a
    huge array for a damaged shape)."""
    dims = [d.size for d in tensor.tensor_shape.dim]
    if len(dims) != 1 or not 0 <= dims[0] <= max(tensor.ByteSize(), 1):
        return np.zeros((0, 0))
    try:
        return tensor_util.make_ndarray(tensor)
    except (ValueError, TypeError):  # a shape that does not match the content
        return np.zeros((0, 0))


def from_arrays(steps: list[int], wall_times: list[float], arrays: list) -> RawSeries:
    """A ``RawSeries`` from one ndarray per step (``summary.stored_vector`` of each)."""
    lengths, parts = [], []
    for array in arrays:
        try:
            vector = stored_vector(array)
        except ValueError:
            lengths.append(-1)
            continue
        lengths.append(vector.size)
        parts.append(vector)
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return RawSeries(
        np.asarray(steps, dtype=np.int64),
        np.asarray(wall_times, dtype=np.float64),
        np.asarray(lengths, dtype=np.int64),
        flat,
    )


def _read_grpc(stub, experiment_id: str, plugin_name: str, run: str, tags: list[str]):
    """Several ``ReadTensors`` calls in parallel threads, so that the data server serializes
    one chunk while this process gathers another."""
    ordered = sorted(tags)
    chunks = [ordered[i : i + GRPC_CHUNK] for i in range(0, len(ordered), GRPC_CHUNK)]
    if len(chunks) == 1:
        return _read_chunk(stub, experiment_id, plugin_name, run, chunks[0])
    found = {}
    with ThreadPoolExecutor(GRPC_THREADS) as pool:
        parts = pool.map(
            lambda chunk: _read_chunk(stub, experiment_id, plugin_name, run, chunk), chunks
        )
        for part in parts:
            found.update(part)
    return found


def _read_chunk(stub, experiment_id: str, plugin_name: str, run: str, tags: list[str]):
    from tensorboard.data.proto import data_provider_pb2

    request = data_provider_pb2.ReadTensorsRequest()
    request.experiment_id = experiment_id
    request.plugin_filter.plugin_name = plugin_name
    request.run_tag_filter.runs.names[:] = [run]
    request.run_tag_filter.tags.names[:] = tags
    request.downsample.num_points = ALL_SAMPLES
    response = stub.ReadTensors(request)
    found = {}
    for run_entry in response.runs:
        if run_entry.run_name != run:
            continue
        for tag_entry in run_entry.tags:
            data = tag_entry.data
            found[tag_entry.tag_name] = _gather(data.step, data.wall_time, data.value)
    return found


_DTYPE_AND_CONTENT = operator.attrgetter("dtype", "tensor_content")


def _gather(steps, wall_times, values) -> RawSeries:
    """The stored vectors of all steps in one pass: the varint bytes (version 2) joined and
    decoded at once, or the ``int64_val`` (version 1) chained. Anything else (a mix, another
    encoding, damaged bytes) goes step by step through ``make_ndarray``."""
    fields = list(map(_DTYPE_AND_CONTENT, values))
    if all(dtype == types_pb2.DT_UINT8 and content for dtype, content in fields):
        found = _gather_varints(steps, wall_times, values, [content for _, content in fields])
        if found is not None:
            return found
    elif all(
        v.dtype == types_pb2.DT_INT64
        and v.int64_val
        and len(v.tensor_shape.dim) == 1
        and v.tensor_shape.dim[0].size == len(v.int64_val)
        for v in values
    ):
        lengths = np.fromiter((len(v.int64_val) for v in values), np.int64, len(values))
        flat = np.fromiter(
            itertools.chain.from_iterable(v.int64_val for v in values),
            np.int64,
            int(lengths.sum()),
        )
        return _raw(steps, wall_times, lengths, flat)
    arrays = [_ndarray(value) for value in values]
    return from_arrays(list(steps), list(wall_times), arrays)


def _gather_varints(steps, wall_times, values, contents: list[bytes]) -> RawSeries | None:
    """Decode the joined varint bytes of all steps; None if a step's bytes are damaged
    (its last varint cut off, a shape that does not match), for the step-by-step path."""
    sizes = np.fromiter(map(len, contents), np.int64, len(contents))
    if any(len(dims) != 1 or dims[0].size != size for dims, size in zip(map(_DIMS, values), sizes)):
        return None
    try:
        flat, lengths = decode_varint_parts(np.frombuffer(b"".join(contents), np.uint8), sizes)
    except ValueError:
        return None
    return _raw(steps, wall_times, lengths, flat)


_DIMS = operator.attrgetter("tensor_shape.dim")


def _raw(steps, wall_times, lengths: np.ndarray, flat: np.ndarray) -> RawSeries:
    return RawSeries(
        np.asarray(steps, dtype=np.int64),
        np.asarray(wall_times, dtype=np.float64),
        lengths.astype(np.int64),
        flat,
    )
