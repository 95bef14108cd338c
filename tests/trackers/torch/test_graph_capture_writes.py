"""When the PyTorch tracker writes the graph: once, again when the calls change, training only."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from tandv_tb.torch import track
from tests.helpers.graph_training import ResidualMLP, Twice, seeded, train
from tests.helpers.model_graphs import graph_steps, recorded_graph


def test_written_once_and_again_when_the_calls_change(tmp_path):
    """Step 3 calls one more module: the next tracked step records the graph again. A
    smaller batch (sizes alone) records nothing again."""

    class Growing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.extra = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
            self.use_extra = False

        def forward(self, x):
            h = self.a(x)
            if self.use_extra:
                h = self.extra(h)
            return self.b(h)

    model = Growing()

    def before(step):
        model.use_extra = step >= 3

    train(model, tmp_path, steps=6, before_step=before)
    assert graph_steps(tmp_path) == {".": [0, 4]}
    assert [n.id for n in recorded_graph(tmp_path).nodes] == ["Growing#0", "a#0", "extra#0", "b#0"]

    torch.manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with track(model, logdir=str(tmp_path / "sizes"), optimizer=optimizer) as tracker:
        for batch in (16, 16, 5):
            model(torch.randn(batch, 4)).sum().backward()
            optimizer.step()
            tracker.step()
    assert graph_steps(tmp_path / "sizes") == {".": [0]}


def test_gradient_accumulation_records_one_forward(tmp_path):
    losses = train(seeded(Twice), tmp_path, steps=2, accumulation=3)
    assert losses == train(seeded(Twice), steps=2, accumulation=3)
    assert [n.id for n in recorded_graph(tmp_path).nodes] == [
        "Twice#0",
        "shared#0",
        "shared#1",
        "out#0",
    ]


# A first step with no module recorded looks to the tracker like compiled code built before
# track(): it says so and resets dynamo (harmless here).
@pytest.mark.filterwarnings("ignore::tandv_tb.torch.CompiledBeforeTrackWarning")
def test_eval_calls_are_left_out_with_only_training(tmp_path):
    model = Twice()

    def before(step):
        model.train(step >= 2)

    train(model, tmp_path, steps=3, before_step=before)
    assert graph_steps(tmp_path) == {".": [2]}


def test_a_users_summary_writer_gets_the_graph(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    model = ResidualMLP()
    with track(model, writer=writer) as tracker:
        model(torch.randn(2, 4)).sum().backward()
        tracker.step()
    writer.close()
    assert len(recorded_graph(tmp_path).nodes) == 9
