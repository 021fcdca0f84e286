"""Task registry: one line per task. A task knows its params, its data, its batches and its
scoring (the interface is in common.py); the pipeline around it is shared."""

from __future__ import annotations

from arithrepro.tasks import abacus, charlm, expr, looped, modular

TASKS = {
    "expr": expr.TASK,
    "abacus": abacus.TASK,
    "looped": looped.TASK,
    "modular": modular.TASK,   # runs as studies (stages/modular_study.py), not grid cells
    "charlm": charlm.TASK,     # runs as its own stages (stages/charlm.py)
}
