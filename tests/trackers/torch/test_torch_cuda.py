"""``tandv_tb.torch.track`` on a CUDA device (skipped without one): nanoGPT trained eagerly
and compiled by inductor into Triton kernels, tracked every step with an element format and
two block formats, trains bit for bit as untracked, in deterministic mode (which a tracker
must not break: it raises at any op torch cannot run deterministically); the compiled graph
stays whole; and the records carry the eager tags. The statistics the device computes are
checked against the reference by the ``torch-cuda`` source of ``tests/stats``."""

from __future__ import annotations

import os

import pytest
import torch

from tandv_tb.torch import track
from tandv_tb.torch.compiled import HOOKS_IN_GRAPH
from tests.helpers.compiled_training import (
    INSIDE,
    NanoGPT,
    Trained,
    assert_same_training,
    tags,
    train_nanogpt,
)
from tests.helpers.cuda_syncs import host_syncs
from tests.helpers.torch_models import ADAM_TYPES, read_records

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

STEPS = 12
FORMATS = ("float8_e4m3fn", "mxfp4_e2m1", "nvfp4")


def cuda_nanogpt(compiled: bool) -> torch.nn.Module:
    torch.compiler.reset()
    torch.manual_seed(0)
    model = NanoGPT().cuda()
    return torch.compile(model) if compiled else model


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """Eager and compiled: untracked twice (deterministic mode really is), tracked every
    step, and every tenth step with the watch."""
    root = tmp_path_factory.mktemp("cuda")
    variants = {
        "plain": {},
        "plain_again": {},
        "every1": {"every": 1, "formats": FORMATS},
        "every10": {"every": 10, "formats": FORMATS},
    }
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    runs: dict[str, Trained] = {}
    try:
        for mode in ("eager", "compiled"):
            for name, options in variants.items():
                if options:
                    options = {**options, "logdir": str(root / mode / name)}
                model = cuda_nanogpt(mode == "compiled")
                runs[mode, name] = train_nanogpt(model, STEPS, device="cuda", **options)
    finally:
        torch.use_deterministic_algorithms(False)
    return {"root": root, "runs": runs}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("variant", ["every1", "every10"])
def test_training_on_cuda_is_bitwise_unchanged(trained, mode, variant):
    runs = trained["runs"]
    assert_same_training(runs[mode, "plain_again"], runs[mode, "plain"])
    assert_same_training(runs[mode, variant], runs[mode, "plain"])
    assert runs[mode, variant].breaks == 0


def test_the_compiled_graph_stays_whole_on_cuda(trained):
    for variant in ("every1", "every10"):
        graphs = trained["runs"]["compiled", variant].graphs
        assert len(set(graphs[1:])) == 1, (variant, graphs)


def test_the_records_on_cuda_carry_the_eager_tags_and_every_format(trained):
    root = trained["root"]
    eager = tags(root / "eager" / "every1")
    assert {t for _, t in eager} == ADAM_TYPES
    recorded = eager - INSIDE
    if not HOOKS_IN_GRAPH:  # before torch 2.12 compiled modules hand nothing over (a warning)
        recorded = {(name, t) for name, t in recorded if t not in ("Activation", "Gradient")}
    assert tags(root / "compiled" / "every1") == recorded
    records = read_records(str(root / "compiled" / "every1"))
    assert sorted({step for _, _, step in records}) == list(range(STEPS))
    assert sorted({step for _, _, step in read_records(str(root / "compiled" / "every10"))}) == [
        0,
        10,
    ]
    for stored in records.values():  # element formats in the tag, block formats' own section
        assert stored.formats == FORMATS[:1]
        assert tuple(stored.record.blocks) == FORMATS[1:]


@pytest.mark.parametrize("deterministic", [False, True])
def test_a_tracked_step_on_cuda_syncs_once_at_step(tmp_path, deterministic):
    """Forward, backward and optimizer step make no more host syncs tracked than untracked
    (the statistics and the watch's counts stay on the device); ``step()`` brings them
    over in one transfer, tracked step or not."""
    torch.manual_seed(0)
    model = NanoGPT().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 64, (4, 17), device="cuda")

    def train() -> None:
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    torch.use_deterministic_algorithms(deterministic)
    try:
        train()
        plain = host_syncs(train)
        for every in (1, 10**9):  # tracked steps; untracked steps with the watch
            with track(model, logdir=str(tmp_path / str(every)), optimizer=optimizer,
                       every=every, formats=FORMATS) as tracker:  # fmt: skip
                train()
                tracker.step()  # step 0 is tracked either way
                counted = [(host_syncs(train), host_syncs(tracker.step)) for _ in range(2)]
            assert counted == [(plain, 1)] * 2, (every, plain, counted)
    finally:
        torch.use_deterministic_algorithms(False)
