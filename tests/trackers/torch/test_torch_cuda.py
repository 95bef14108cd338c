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

from tests.helpers.compiled_training import NanoGPT, Trained, train_nanogpt
from tests.helpers.torch_models import ADAM_TYPES, read_records

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

STEPS = 12
FORMATS = ("float8_e4m3fn", "mxfp4_e2m1", "nvfp4")
#: A compiled nanoGPT's logits' gradient stays inside its graph (``test_torch_compile``).
INSIDE = {("NanoGPT", "Gradient")}


def cuda_nanogpt(compiled: bool) -> torch.nn.Module:
    torch.compiler.reset()
    torch.manual_seed(0)
    model = NanoGPT().cuda()
    return torch.compile(model) if compiled else model


def tags(logdir) -> set[tuple[str, str]]:
    return {(name, tensor_type) for name, tensor_type, _ in read_records(str(logdir))}


def assert_same_training(got: Trained, want: Trained) -> None:
    assert [float.hex(x) for x in got.losses] == [float.hex(x) for x in want.losses]
    for name, weight in want.weights.items():
        assert torch.equal(got.weights[name], weight), name


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
    assert tags(root / "compiled" / "every1") == eager - INSIDE
    records = read_records(str(root / "compiled" / "every1"))
    assert sorted({step for _, _, step in records}) == list(range(STEPS))
    assert sorted({step for _, _, step in read_records(str(root / "compiled" / "every10"))}) == [
        0,
        10,
    ]
    for stored in records.values():
        assert stored.formats == FORMATS
