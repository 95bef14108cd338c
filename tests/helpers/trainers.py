"""Reading a trainer's run back: its scalars (TensorBoard's own loader) and its numerics
(``read_frame``), for the Lightning and Hugging Face callback tests."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tandv_tb import read_frame


def scalars(run_dir: Path | str, tag: str) -> dict[int, float]:
    """``step -> value`` of the scalar ``tag`` in the run folder ``run_dir``."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {event.step: event.value for event in accumulator.Scalars(tag)}


def numerics_steps(run_dir: Path | str) -> dict[tuple[str, str], list[int]]:
    """``(tensor_type, name) -> sorted steps`` of the numerics in the run folder ``run_dir``
    itself (not in folders below it)."""
    frame = read_frame(run_dir, run=".")
    meta = frame["metadata"]
    steps: dict[tuple[str, str], list[int]] = {}
    for tensor_type, name, step in zip(meta["tensor_type"], meta["name"], meta["step"]):
        steps.setdefault((tensor_type, name), []).append(int(step))
    return {key: sorted(value) for key, value in steps.items()}


def event_files(run_dir: Path | str) -> list[Path]:
    """The event files directly in ``run_dir``."""
    return sorted(Path(run_dir).glob("events.out.tfevents.*"))
