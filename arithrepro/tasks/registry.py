"""Task registry: one line per task. Every list of tasks (params blocks, command-line choices,
help texts) is derived from this table.

Checked when the table is built: a task that generates text token by token (`decodes`) accepts
only models that declare they decode (models/registry.py).
"""

from __future__ import annotations

from arithrepro.models.registry import MODELS
from arithrepro.tasks import abacus, charlm, expr, looped, modular
from arithrepro.tasks.base import GridTask, Task

TASKS: dict[str, Task] = {
    "expr": expr.TASK,
    "abacus": abacus.TASK,
    "looped": looped.TASK,
    "modular": modular.TASK,   # runs as studies (stages/modular_study.py), not grid cells
    "charlm": charlm.TASK,     # runs as its own stages (stages/charlm_*.py)
}

GRID_TASKS: dict[str, GridTask] = {n: t for n, t in TASKS.items() if t.grid}


def models_of(task: Task) -> list[str]:
    """The registry models `task` accepts: its kind, and configured where it looks for them."""
    return [m for m, s in MODELS.items()
            if s.kind == task.model_kind and (s.grid if task.grid else s.task == task.name)]


def _check() -> None:
    for name, task in TASKS.items():
        if task.name != name:
            raise TypeError(f"task registry: {name!r} holds a task named {task.name!r}")
        for model in models_of(task):
            if task.decodes and not MODELS[model].decodes:
                raise TypeError(f"task registry: {name} decodes token by token, but model "
                                f"{model} declares decodes=False")


_check()
