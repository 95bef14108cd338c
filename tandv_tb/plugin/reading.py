"""Reading every stored step of some tags from the data provider, as flat int64 arrays.

The provider's public ``read_tensors`` turns each step into an ndarray with
``tensor_util.make_ndarray``, tens of microseconds a step: 200 layers x 1,000 steps take
many seconds. With TensorBoard's data server (``--load_fast``, the default loader) the same
``ReadTensors`` request is sent on the provider's own gRPC stub (in chunks, in parallel)
and the ``int64_val`` of all steps are gathered in one pass, several times faster. Any
other provider (the Python loader) or an unexpected stub goes through the public API. Both
give the same ``RawSeries``; ``tests/test_plugin_reading.py`` checks that.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tensorboard.data import provider as tb_provider
from tensorboard.util import tensor_util

logger = logging.getLogger(__name__)

#: Ask the provider for every step it holds (it holds what ``--samples_per_plugin`` keeps).
ALL_SAMPLES = 1 << 40
#: Tags per ``ReadTensors`` call, and calls in flight at once.
GRPC_CHUNK = 25
GRPC_THREADS = 3


@dataclasses.dataclass
class RawSeries:
    """The stored steps of one tag: value i is ``flat[offsets[i]:offsets[i] + lengths[i]]``;
    ``lengths[i] == -1`` marks a value that is not a 1-D integer vector."""

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


def from_arrays(steps: list[int], wall_times: list[float], arrays: list) -> RawSeries:
    """A ``RawSeries`` from one ndarray per step."""
    lengths, parts = [], []
    for array in arrays:
        array = np.asarray(array)
        if array.ndim == 1 and array.dtype.kind in "iu":
            lengths.append(array.size)
            parts.append(array.astype(np.int64, copy=False))
        else:
            lengths.append(-1)
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


def _gather(steps, wall_times, values) -> RawSeries:
    """Flatten the ``int64_val`` of all steps in one pass. tandv_tb writes nothing else; a
    step without ``int64_val`` (another encoding) goes through ``make_ndarray`` instead."""
    lengths = np.fromiter((len(v.int64_val) for v in values), np.int64, len(values))
    if not lengths.all():
        arrays = [tensor_util.make_ndarray(v) for v in values]
        return from_arrays(list(steps), list(wall_times), arrays)
    flat = np.fromiter(
        itertools.chain.from_iterable(v.int64_val for v in values), np.int64, int(lengths.sum())
    )
    return RawSeries(
        np.asarray(steps, dtype=np.int64),
        np.asarray(wall_times, dtype=np.float64),
        lengths,
        flat,
    )
