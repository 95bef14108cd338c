"""The two orders of tensor types, each written once in ``disk.metadata``: execution order
(what happened first in a step: findings, the watch's entries) and display order (menus)."""

from __future__ import annotations

from tandv_tb.event_files.metadata import execution_key, tensor_type_key
from tandv_tb.event_files.nonfinite_record import NonfiniteEntry, merge

#: One step of a two-module model, in the order it runs.
STEP = [
    ("Input", 0, "m0"),
    ("Activation", 0, "m0"),
    ("Input", 1, "m1"),
    ("Activation", 1, "m1"),
    ("Gradient", 1, "m1"),
    ("Input_Gradient", 1, "m1"),
    ("Gradient", 0, "m0"),
    ("Input_Gradient", 0, "m0"),
    ("Weight_Gradient", 0, "m0.w"),
    ("Weight_Gradient", 1, "m1.w"),
    ("Weight", 0, "m0.w"),
    ("Weight", 1, "m1.w"),
    ("Optimiser_State.exp_avg", 0, "m0.w"),  # each parameter's state, parameter by parameter
    ("Optimiser_State.step", 0, "m0.w"),
    ("Optimiser_State.exp_avg", 1, "m1.w"),
    ("Custom", 0, "x"),
]


def test_execution_key_puts_a_step_in_the_order_it_runs():
    shuffled = sorted(STEP, key=lambda t: (t[2], t[0]))
    assert sorted(shuffled, key=lambda t: execution_key(*t)) == STEP


def test_the_watch_merges_in_execution_order_keeping_each_pass_as_observed():
    """Hooks see the forward and backward passes in execution order, and the entries of
    several ranks come rank after rank: ``merge`` keeps that order within the passes
    (rank 1's activation after rank 0's gradient), and sorts what is read at ``step()``."""
    observed = [
        ("m0.w", "Weight", (1, 0, 0)),
        ("m0", "Activation", (1, 0, 0)),
        ("m0", "Gradient", (1, 0, 0)),
        ("m0.w", "Weight_Gradient", (1, 0, 0)),
        ("m1", "Activation", (0, 1, 0)),  # another rank's, gathered after rank 0's
    ]
    merged = merge(observed)
    assert [(e.tensor_type, e.name) for e in merged] == [
        ("Activation", "m0"),
        ("Gradient", "m0"),
        ("Activation", "m1"),
        ("Weight_Gradient", "m0.w"),
        ("Weight", "m0.w"),
    ]
    assert merged[2] == NonfiniteEntry("Activation", "m1", 0, 1, 0)


def test_display_order_is_the_contracts_list_then_optimiser_states_then_others():
    types = [t for t, _, _ in STEP]
    assert sorted(set(types), key=tensor_type_key) == [
        "Activation",
        "Gradient",
        "Input",
        "Input_Gradient",
        "Weight",
        "Weight_Gradient",
        "Optimiser_State.exp_avg",
        "Optimiser_State.step",
        "Custom",
    ]
