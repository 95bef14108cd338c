"""Where a tracked tensor's values lie over the ranks, so that each logical tensor is
counted once, over its whole extent, whatever the parallelism.

Ranks relate in three ways. Data-parallel ranks hold different data (each its part of the
batch): every rank's values count. Sharding ranks (FSDP, tensor parallelism) hold different
pieces of one tensor: every piece counts. Replicas (DDP's parameters, a ``RowwiseParallel``
output on every rank of its tensor-parallel group) hold the same values: one counts. A
rank whose values another rank counts records nothing (``Spread.ELSEWHERE``), so the
combined statistics are exact and the combining needs nothing beyond its one collective.

What tells the layout:

- A ``DTensor``: its placements over its device mesh. ``Replicate`` along a mesh
  dimension: the rank at coordinate 0 along it counts; ``Shard`` (any kind): every rank;
  ``Partial``: the values are pending sums, not the tensor's, and are not recorded.
- A plain tensor that ``DTensor.to_local()`` handed out: the placements of the DTensor it
  is the local part of (``provenance``). This is what tensor-parallel styles hand the next
  module with their default ``use_local_output=True``, and what a container returns when
  it passes such an output on.
- ``track(layouts=..., mesh=...)``: placements over ``mesh`` for the names matching a
  regular expression (a tensor computed from local parts, such as an activation module's
  output between ``ColwiseParallel`` and ``RowwiseParallel``).
- Outside a mesh (other data-parallel replicas, other pipeline stages), an activation,
  gradient or input is other data; a parameter (weight, its gradient, optimizer state) is
  another copy of the same tensor, or another stage's tensor: of the ranks holding a
  parameter, the copy on the lowest ranks counts (``owners``, agreed once at ``track``).
- A plain tensor none of these tells the layout of is ``UNTOLD``: data-parallel data in a
  model that does not compute with DTensors (as in DDP and FSDP), and recorded per rank
  where it does (``tensor_parallel``), since it may be a replica or a shard: never guessed.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence

import torch
import torch.distributed as dist

try:
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Placement
except ImportError:  # a build without distributed support
    AsyncCollectiveTensor = DTensor = DeviceMesh = Placement = None


class Spread(str, enum.Enum):
    """How one rank's values of a tracked tensor stand to the other ranks'."""

    WHOLE = "whole"  # the whole tensor, counted by this rank alone
    PIECE = "piece"  # other ranks hold other data or other shards: merged with theirs
    UNTOLD = "untold"  # a plain tensor nothing tells the layout of: data, or per rank
    ELSEWHERE = "elsewhere"  # a replica another rank counts: not recorded here
    PARTIAL = "partial"  # pending partial sums of a DTensor: not the tensor's values


#: A device mesh and the placements of a tensor over it.
Placed = tuple["DeviceMesh", tuple["Placement", ...]]


def provenance(tensor: torch.Tensor) -> Placed | None:
    """The mesh and placements of the DTensor whose ``to_local()`` returned ``tensor``.

    ``to_local`` runs an autograd function whose node keeps the DTensor's spec
    (``dtensor_spec``): private, pinned by tests/project/test_private_api_pins.py. Without
    autograd (``no_grad``) there is no node, and the tensor is ``UNTOLD``.
    """
    spec = getattr(tensor.grad_fn, "dtensor_spec", None)
    if spec is None or not hasattr(spec, "placements"):
        return None
    return spec.mesh, tuple(spec.placements)


def placed(tensor: torch.Tensor) -> Placed | None:
    """The mesh and placements a DTensor, or a local part of one, tells."""
    if DTensor is not None and isinstance(tensor, DTensor):
        return tensor.device_mesh, tuple(tensor.placements)
    return provenance(tensor)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The values this rank holds: a DTensor's local part; the result of a collective
    that may be in flight (``AsyncCollectiveTensor``: a ``RowwiseParallel`` output) once
    it is done, not its wrapper, whose memory is not yet the values; any other tensor
    itself. (Private module, pinned by tests/project/test_private_api_pins.py.)"""
    if DTensor is not None and isinstance(tensor, DTensor):
        tensor = tensor.to_local()
    if AsyncCollectiveTensor is not None and isinstance(tensor, AsyncCollectiveTensor):
        return tensor.wait()
    return tensor


def mesh_ranks(mesh: DeviceMesh) -> list[int]:
    """The global ranks of a device mesh."""
    return [int(rank) for rank in mesh.mesh.reshape(-1).tolist()]


def counted_here(mesh: DeviceMesh, placements: Sequence[Placement]) -> Spread:
    """``PIECE`` where this rank's part counts (coordinate 0 along every ``Replicate``
    dimension), ``ELSEWHERE`` where another rank's replica does, ``PARTIAL`` for pending
    sums."""
    if any(p.is_partial() for p in placements):
        return Spread.PARTIAL
    coordinate = mesh.get_coordinate()
    if coordinate is None:  # not this rank's mesh: nothing of it is here
        return Spread.ELSEWHERE
    replica = any(p.is_replicate() and c != 0 for p, c in zip(placements, coordinate))
    return Spread.ELSEWHERE if replica else Spread.PIECE


class UntoldLayoutWarning(UserWarning):
    """A tensor's layout over the ranks cannot be told: it is recorded per rank."""


class ParallelLayout:
    """Tells each tracked tensor's ``Spread`` on this rank.

    ``combining``: whether ranks' statistics are combined (else every tensor is this
    rank's ``WHOLE``, as ``per_rank=True`` and one process record it). ``parameters``:
    every parameter by name, whose owning copies the ranks agree on (one
    ``all_gather_object`` over ``group``, at ``track``). ``flat_parameters``: FSDP1's, of
    which every rank holds another part. ``layouts`` and ``mesh``: ``track``'s, checked
    against the model here.
    """

    def __init__(
        self,
        parameters: Iterable[tuple[str, torch.Tensor]],
        *,
        combining: bool,
        group: object = None,
        flat_parameters: bool = False,
        layouts: Mapping[object, object] | None = None,
        mesh: object = None,
    ) -> None:
        self._combining = combining
        self._flat_parameters = flat_parameters
        self._declared = declared_layouts(layouts, mesh)
        self._mesh = mesh
        self._names: dict[str, Placed | None] = {}
        #: Whether the model computes with DTensors (or ``mesh`` says it is model-parallel):
        #: a plain tensor there may be a replica or a shard.
        self.tensor_parallel = mesh is not None
        parameters = list(parameters)
        meshes = _meshes(tensor for _, tensor in parameters)
        if mesh is not None:
            _check_mesh(mesh, meshes)
        self._owners: dict[str, int] = {}
        if combining:
            self.rank = dist.get_rank()
            _check_group(group, meshes + ([mesh] if mesh is not None else []))
            self._owners = _owners(parameters, group)

    def of_data(self, name: str, tensor: torch.Tensor) -> Spread:
        """The spread of an activation, input or attached tensor (their gradients share
        it): other ranks hold other data, save where placements say replica."""
        if not self._combining:
            return _own(tensor)
        where = placed(tensor)
        if where is not None:
            self.tensor_parallel = True
        else:
            where = self._declared_for(name)
        return Spread.UNTOLD if where is None else counted_here(*where)

    def of_parameter(self, name: str, tensor: torch.Tensor) -> Spread:
        """The spread of a weight, its gradient or an optimizer state tensor of it."""
        if not self._combining:
            return _own(tensor)
        if self._flat_parameters:
            return Spread.PIECE
        where = placed(tensor)
        if self._owners.get(name, self.rank) != _copy(where, self.rank):
            return Spread.ELSEWHERE
        if where is None:
            return Spread.WHOLE
        spread = counted_here(*where)
        whole = all(p.is_replicate() for p in where[1])
        return Spread.WHOLE if spread is Spread.PIECE and whole else spread

    def _declared_for(self, name: str) -> Placed | None:
        if not self._declared:
            return None
        if name not in self._names:
            found = (p for pattern, p in self._declared if pattern.search(name))
            placements = next(found, None)
            self._names[name] = None if placements is None else (self._mesh, placements)
        return self._names[name]


def _own(tensor: torch.Tensor) -> Spread:
    """A tensor of a run that does not combine ranks: this rank's whole, save pending sums."""
    dtensor = DTensor is not None and isinstance(tensor, DTensor)
    partial = dtensor and any(p.is_partial() for p in tensor.placements)
    return Spread.PARTIAL if partial else Spread.WHOLE


def _copy(where: Placed | None, rank: int) -> int:
    """Which copy of a parameter this rank's part belongs to: the lowest rank of its mesh
    (the rank itself for a plain tensor)."""
    return rank if where is None else min(mesh_ranks(where[0]))


def _meshes(tensors: Iterable[torch.Tensor]) -> list[DeviceMesh]:
    """The distinct device meshes the DTensors among ``tensors`` lie on."""
    meshes: list = []
    for tensor in tensors:
        if DTensor is not None and isinstance(tensor, DTensor):
            mesh = tensor.device_mesh
            if all(mesh is not known for known in meshes):
                meshes.append(mesh)
    return meshes


def _owners(parameters: list[tuple[str, torch.Tensor]], group: object) -> dict[str, int]:
    """Each parameter name's owning copy: the lowest among all ranks' copies of it."""
    rank = dist.get_rank()
    mine = {name: _copy(placed(tensor), rank) for name, tensor in parameters}
    gathered: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, mine, group=group)
    owners: dict[str, int] = {}
    for copies in gathered:
        for name, copy in copies.items():
            owners[name] = min(copy, owners.get(name, copy))
    return owners


def _check_group(group: object, meshes: list[DeviceMesh]) -> None:
    """A clear error where ``process_group`` leaves out ranks the model lies on."""
    ranks = set(dist.get_process_group_ranks(group or dist.group.WORLD))
    for mesh in meshes:
        missing = sorted(set(mesh_ranks(mesh)) - ranks)
        if missing:
            raise ValueError(
                f"process_group holds ranks {sorted(ranks)}, but the model lies on a device "
                f"mesh of ranks {mesh_ranks(mesh)}: the parts on ranks {missing} would be "
                "missing from every record; combine over a group holding the whole mesh"
            )


def _check_mesh(mesh: DeviceMesh, meshes: list[DeviceMesh]) -> None:
    """A clear error where ``mesh`` is no (sub-)mesh of those the parameters lie on."""
    if mesh.get_coordinate() is None:
        raise ValueError(f"mesh {mesh} does not hold this rank ({dist.get_rank()})")
    if meshes and not any(_sub_mesh_of(mesh, m) for m in meshes):
        raise ValueError(
            f"mesh {mesh} does not match the model's placements: its parameters lie on "
            f"{', '.join(map(str, meshes))}, and mesh is neither of them nor a sub-mesh "
            "of one through this rank (give the mesh the layouts refer to, e.g. "
            'world_mesh["tp"])'
        )


def _sub_mesh_of(mesh: DeviceMesh, whole: DeviceMesh) -> bool:
    """Whether ``mesh`` is ``whole`` cut to some of its dimensions through this rank."""
    coordinate = whole.get_coordinate()
    if coordinate is None:
        return False
    for kept in itertools.combinations(range(whole.ndim), mesh.ndim):
        index = tuple(slice(None) if d in kept else c for d, c in enumerate(coordinate))
        cut = whole.mesh[index]
        if cut.shape == mesh.mesh.shape and torch.equal(cut, mesh.mesh):
            return True
    return False


def declared_layouts(layouts: Mapping[object, object] | None, mesh: object) -> list:
    """``track``'s ``layouts`` as (compiled pattern, placements) pairs, checked."""
    if layouts is None:
        if mesh is not None:
            raise ValueError("mesh is only used with layouts (the placements it refers to)")
        return []
    if not isinstance(layouts, Mapping):
        raise TypeError(
            f"layouts must be a mapping of regular expressions to placements, "
            f"got {type(layouts).__name__}"
        )
    if DeviceMesh is None or not isinstance(mesh, DeviceMesh):
        raise TypeError(f"layouts needs mesh, the DeviceMesh they refer to, got {mesh!r}")
    declared = []
    for pattern, placements in layouts.items():
        if isinstance(placements, Placement):
            placements = (placements,)
        placements = tuple(placements) if isinstance(placements, Sequence) else (placements,)
        if not all(isinstance(p, Placement) for p in placements):
            raise TypeError(
                f"layouts[{pattern!r}] must be placements (Shard, Replicate), got {placements!r}"
            )
        if len(placements) != mesh.ndim:
            raise ValueError(
                f"layouts[{pattern!r}] has {len(placements)} placements for a "
                f"mesh of {mesh.ndim} dimensions"
            )
        if any(p.is_partial() for p in placements):
            raise ValueError(f"layouts[{pattern!r}]: pending partial sums cannot be recorded")
        try:
            declared.append((re.compile(pattern), placements))
        except (re.error, TypeError) as error:
            raise ValueError(f"layouts: invalid regular expression {pattern!r}: {error}") from None
    return declared
