"""Two ranks (``torchrun --nproc_per_node=2``, gloo): statistics combined across ranks.

The test runs this file under torchrun; its ``__main__`` part is the training both ranks
run (DDP, then FSDP2's ``fully_shard``), saving what each rank saw for the test to check.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tandv_tb.event_files.nonfinite import NonfiniteEntry, read_nonfinite
from tandv_tb.torch import track
from tests.helpers.model_graphs import graph_steps, recorded_graph
from tests.helpers.torch_models import assert_same, expected, read_records
from tests.helpers.torchrun import run_ranks

pytestmark = pytest.mark.distributed

FORMATS = ("float8_e4m3fn", "mxfp4_e2m1")


def _capture(modules: dict[str, nn.Module], seen: dict) -> None:
    """Keep every output of ``modules`` and its gradient (per step: the last one wins)."""

    def on_output(name, module, args, output):
        seen.setdefault(("Activation", name), []).append(output.detach().clone())
        output.register_hook(lambda g: seen.setdefault(("Gradient", name), []).append(g.clone()))

    for name, module in modules.items():
        module.register_forward_hook(functools.partial(on_output, name))


def _train_ddp(logdir: str) -> dict:
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    seen: dict = {}
    _capture({"0": model[0], "2": model[2]}, seen)
    calls = []
    all_reduce = dist.all_reduce

    def counted(*args, **kwargs):
        calls.append(1)
        return all_reduce(*args, **kwargs)

    generator = torch.Generator().manual_seed(100 + rank)
    combined = track(ddp, logdir=f"{logdir}/ddp", optimizer=optimizer, formats=FORMATS)
    per_rank = track(ddp, logdir=f"{logdir}/per_rank", optimizer=optimizer, per_rank=True)
    for _ in range(2):
        seen.clear()
        x = torch.randn(6 + 3 * rank, 4, generator=generator) * 100  # ranks differ in size
        optimizer.zero_grad()
        ddp(x).square().mean().backward()
        optimizer.step()
        per_rank.step()
        dist.all_reduce = counted
        combined.step()
        dist.all_reduce = all_reduce
    combined.close()
    per_rank.close()
    return {
        "seen": seen,
        "collectives": len(calls),
        "weights": {n: p.detach().clone() for n, p in model.named_parameters()},
        "momentum": {n: optimizer.state[p]["momentum_buffer"] for n, p in model.named_parameters()},
    }


def _train_fsdp(logdir: str) -> dict:
    from torch.distributed.fsdp import fully_shard

    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
    fully_shard(model[0])
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters())
    seen: dict = {}
    _capture({"0": model[0]}, seen)
    with track(model, logdir=f"{logdir}/fsdp", optimizer=optimizer) as tracker:
        x = torch.randn(4 + rank, 4, generator=torch.Generator().manual_seed(7 + rank))
        model(x).square().mean().backward()
        optimizer.step()
        tracker.step()
    return {
        "seen": seen,
        "weights": {n: p.full_tensor() for n, p in model.named_parameters()},
        "exp_avg": {
            n: optimizer.state[p]["exp_avg"].full_tensor() for n, p in model.named_parameters()
        },
        "local_rows": model[0].weight.to_local().shape[0],
    }


def _train_fsdp1(logdir: str) -> dict:
    from torch.distributed.fsdp import FullyShardedDataParallel

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    wrapped = FullyShardedDataParallel(model, use_orig_params=True, device_id=torch.device("cpu"))
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    with track(wrapped, logdir=f"{logdir}/fsdp1", optimizer=optimizer) as tracker:
        wrapped(torch.randn(3, 4)).sum().backward()
        optimizer.step()
        tracker.step()
    with FullyShardedDataParallel.summon_full_params(wrapped):
        return {"weights": {n: p.detach().clone() for n, p in model.named_parameters()}}


class Uneven(nn.Module):
    """``b`` runs on rank 1 at step 1 only; ``a`` runs in bfloat16 there."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        odd = dist.get_rank() == 1 and step == 1
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=odd):
            y = self.a(x)
        return self.b(y.float()) if odd else y


def _train_uneven(logdir: str) -> dict:
    torch.manual_seed(0)
    model = Uneven()
    seen: dict = {}
    _capture({"a": model.a, "b": model.b}, seen)
    with track(model, logdir=f"{logdir}/uneven", track_weights=False) as tracker:
        for step in range(3):
            seen.clear()
            model(torch.randn(2, 4), step).sum().backward()
            tracker.step()
            if step == 1:
                kept = dict(seen)
    return {"seen": kept}


def _train_watch(logdir: str) -> dict:
    """NaN in rank 1's batch only, at step 3, off the cadence (every=5)."""
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(100 + rank)
    with track(ddp, logdir=f"{logdir}/watch", optimizer=optimizer, every=5) as tracker:
        for step in range(6):
            x = torch.randn(6, 4, generator=generator)
            if step == 3 and rank == 1:
                x[0] = float("nan")
            optimizer.zero_grad()
            ddp(x).square().mean().backward()
            optimizer.step()
            tracker.step()
    return {}


def main(logdir: str) -> None:
    dist.init_process_group("gloo")
    saved = {"ddp": _train_ddp(logdir), "fsdp": _train_fsdp(logdir)}
    saved["watch"] = _train_watch(logdir)
    saved["uneven"] = _train_uneven(logdir)
    saved["fsdp1"] = _train_fsdp1(logdir)
    torch.save(saved, f"{logdir}/rank{dist.get_rank()}.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[Path, list[dict]]:
    logdir = tmp_path_factory.mktemp("ranks")
    return logdir, run_ranks(__file__, logdir, 2)


def test_data_parallel_activations_and_gradients_describe_the_global_batch(two_ranks):
    logdir, ranks = two_ranks
    records = read_records(str(logdir / "ddp"))
    for tensor_type in ("Activation", "Gradient"):
        for name in ("0", "2"):
            both = [t for r in ranks for t in r["ddp"]["seen"][tensor_type, name]]
            stored = records[name, tensor_type, 1]
            assert_same(stored.record, expected(both, FORMATS))
            assert stored.formats == FORMATS[:1]  # block formats are kept apart
            assert list(stored.record.blocks) == ["mxfp4_e2m1"]
    assert records["0", "Activation", 1].record.numel == (6 + 9) * 5
    assert records["0", "Activation", 1].module_type == "Linear"
    assert ranks[0]["ddp"]["collectives"] == ranks[1]["ddp"]["collectives"] == 2


def test_the_writing_rank_writes_the_graph_once_and_per_rank_runs_their_own(two_ranks):
    logdir, _ = two_ranks
    assert graph_steps(logdir / "ddp") == {".": [0]}
    assert graph_steps(logdir / "per_rank") == {"rank0": [0], "rank1": [0]}
    graph = recorded_graph(logdir / "ddp")  # named without DDP's ``module.``, rank 0's batch
    assert [(n.id, [s.shape for s in n.outputs]) for n in graph.nodes] == [
        ("Sequential#0", [(6, 3)]),
        ("0#0", [(6, 5)]),
        ("1#0", [(6, 5)]),
        ("2#0", [(6, 3)]),
    ]


def test_replicated_parameters_are_recorded_once(two_ranks):
    logdir, ranks = two_ranks
    records = read_records(str(logdir / "ddp"))
    for name, weight in ranks[0]["ddp"]["weights"].items():
        assert torch.equal(weight, ranks[1]["ddp"]["weights"][name])
        assert_same(records[name, "Weight", 1].record, expected(weight, FORMATS))
        momentum = ranks[0]["ddp"]["momentum"][name]
        stored = records[name, "Optimiser_State.momentum_buffer", 1].record
        assert_same(stored, expected(momentum, FORMATS))
    assert {n for n, _, _ in records} == {"0", "1", "2", "Sequential", "0.weight", "0.bias"} | {
        "2.weight",
        "2.bias",
    }


def test_per_rank_runs_hold_each_ranks_own_statistics(two_ranks):
    logdir, ranks = two_ranks
    for k, rank in enumerate(ranks):
        records = read_records(str(logdir / "per_rank" / f"rank{k}"))
        assert_same(
            records["0", "Activation", 1].record, expected(rank["ddp"]["seen"]["Activation", "0"])
        )
        assert_same(
            records["0.weight", "Weight", 1].record, expected(rank["ddp"]["weights"]["0.weight"])
        )


def test_sharded_parameters_are_recorded_as_their_full_tensor(two_ranks):
    logdir, ranks = two_ranks
    records = read_records(str(logdir / "fsdp"))
    fsdp = ranks[0]["fsdp"]
    assert (fsdp["local_rows"], ranks[1]["fsdp"]["local_rows"]) == (3, 2)  # uneven shards
    for name, weight in fsdp["weights"].items():
        assert_same(records[name, "Weight", 0].record, expected(weight))
        assert_same(
            records[name, "Optimiser_State.exp_avg", 0].record, expected(fsdp["exp_avg"][name])
        )
    both = [t for r in ranks for t in r["fsdp"]["seen"]["Activation", "0"]]
    assert_same(records["0", "Activation", 0].record, expected(both))
    assert records["0", "Activation", 0].module_type == "Linear"
    # fully_shard makes the root an FSDPSequential: it keeps its own name
    assert ("Sequential", "Activation", 0) in records
    assert not any(name.startswith("FSDP") for name, _, _ in records)


def test_fsdp1_flat_parameters_are_recorded_per_parameter(two_ranks):
    logdir, ranks = two_ranks
    records = read_records(str(logdir / "fsdp1"))
    for name, weight in ranks[0]["fsdp1"]["weights"].items():
        assert_same(records[name, "Weight", 0].record, expected(weight))


def test_tensors_tracked_on_some_ranks_only_or_in_other_dtypes(two_ranks):
    logdir, ranks = two_ranks
    records = read_records(str(logdir / "uneven"))
    only = ranks[1]["uneven"]["seen"]
    assert_same(records["b", "Activation", 1].record, expected(only["Activation", "b"]))
    assert ("b", "Activation", 2) not in records
    both = [r["uneven"]["seen"]["Activation", "a"][0].float() for r in ranks]
    assert only["Activation", "a"][0].dtype == torch.bfloat16
    assert_same(records["a", "Activation", 1].record, expected(both))
    assert {s for n, t, s in records if n == "a"} == {0, 1, 2}


def test_a_nan_on_one_rank_is_named_and_every_rank_tracks_the_next_step(two_ranks):
    logdir, _ = two_ranks
    found = read_nonfinite(logdir / "watch")
    assert found[0].step == 3
    assert found[0].entries[0] == NonfiniteEntry("Activation", "0", 5, 0, 0)  # rank 1's row
    # the averaged gradients are NaN on both ranks; replicated weights counted once
    weight_gradient = {e.name: e for e in found[0].entries if e.tensor_type == "Weight_Gradient"}
    assert weight_gradient["0.weight"].nan == 20
    assert {s for _, _, s in read_records(str(logdir / "watch"))} == {0, 4, 5}


if __name__ == "__main__":
    main(sys.argv[1])
