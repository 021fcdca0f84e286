"""The one writer of a run's records: train.json, a task's own record of a run scored as it
trains, and the evaluate stage's record of a grid run. Kept apart from the runner so that the
evaluate stage, which writes a record, does not depend on the training loop's code."""

from __future__ import annotations

from pathlib import Path

from arithrepro.runs import Run


def write_record(path: Path, run: Run, fields: dict, origin: dict) -> dict:
    """Every record a run has, the same shape: the run's head (task, model, size, seed), the
    fields, and last its provenance (`origin`: each stage's that made it). Returns it."""
    from arithrepro.io import write_json

    record = {**run.head(), **fields, "provenance": origin}
    write_json(path, record)
    return record
