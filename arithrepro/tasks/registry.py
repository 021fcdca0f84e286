"""Task registry: one line per task. Every list of tasks (params blocks, command-line choices,
help texts) is derived from this table.

Checked when the table is built: a task offers known forms (models/forms.py), and one that
generates text token by token (`decodes`) accepts only models that decode in the form they meet
it in (models/registry.py).
"""

from __future__ import annotations

from arithrepro.models.forms import FORMS, adapted_spec, meeting
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
    """The registry models `task`'s own runs build: those it configures itself, else the grid
    models of its first form."""
    if task.own_models:
        return list(task.own_models)
    return [m for m, s in MODELS.items() if s.grid and s.form == task.forms[0]]


def cross_models(task: Task) -> list[str]:
    """The other grid models that take one of `task`'s forms, directly or through an adapter:
    the benchmark trains them on it (arithrepro/bench.py)."""
    if not task.grid:
        return []
    own = models_of(task)
    return [m for m, s in MODELS.items() if s.grid and m not in own and meeting(s, task.forms)]


def _check() -> None:
    for name, task in TASKS.items():
        if task.name != name:
            raise TypeError(f"task registry: {name} holds a task named {task.name!r}")
        unknown = [f for f in task.forms if f not in FORMS]
        if not task.forms or unknown:
            raise TypeError(f"task registry: {name} offers forms {task.forms}; known: "
                            f"{', '.join(FORMS)}")
        for model in models_of(task) + cross_models(task):
            spec = MODELS[model]
            met = meeting(spec, task.forms)
            if met is None or (task.own_models and spec.grid):
                raise TypeError(f"task registry: {name} builds {model}, a {spec.form} model "
                                f"sized by {spec.sizes}; it offers {', '.join(task.forms)} and "
                                "takes models sized by the run")
            if task.decodes and not adapted_spec(spec, met[1], met[0]).decodes:
                raise TypeError(f"task registry: {name} decodes token by token, but model "
                                f"{model} declares decodes=False")
            if spec.budget_fields and sum(model in t.sizes_models for t in GRID_TASKS.values()) != 1:
                raise TypeError(f"task registry: {model} has budget fields "
                                f"({', '.join(spec.budget_fields)}); exactly one grid task must "
                                "size them (sizes_models)")
            if task.needs_cost and not spec.cost:
                raise TypeError(f"task registry: {name} prices its models, but {model} "
                                "declares no cost formula")


_check()
