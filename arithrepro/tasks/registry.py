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
    "modular": modular.TASK,   # runs scored as they train (train-modular-<study>)
    "charlm": charlm.TASK,     # the same (train-charlm), then its own stages (charlm-*)
}

GRID_TASKS: dict[str, GridTask] = {n: t for n, t in TASKS.items() if t.grid}


def models_of(task: Task) -> list[str]:
    """The registry models `task` accepts: those it configures itself, else the grid models of
    its kind."""
    if task.own_models:
        return list(task.own_models)
    return [m for m, s in MODELS.items() if s.kind == task.model_kind and s.grid]


def _check() -> None:
    for name, task in TASKS.items():
        if task.name != name:
            raise TypeError(f"task registry: {name!r} holds a task named {task.name!r}")
        for model in models_of(task):
            spec = MODELS[model]
            if task.decodes and not spec.decodes:
                raise TypeError(f"task registry: {name} decodes token by token, but model "
                                f"{model} declares decodes=False")
            if spec.kind != task.model_kind or (task.own_models and spec.grid):
                raise TypeError(f"task registry: {name} builds {model}, a {spec.kind} model "
                                f"sized by {spec.sizes}; it takes {task.model_kind} models "
                                "sized by the run")
            if task.needs_cost and not spec.cost:
                raise TypeError(f"task registry: {name} prices its models, but {model} "
                                "declares no cost formula")


_check()
