"""Task registry: one line per task, its module. Every list of tasks (params blocks,
command-line choices, help texts) is derived from this table. A task module defines its task,
`TASK` (data and scoring: tasks/base.py), and beside it what it declares (tasks/declared.py):
its part of dvc.yaml, `STAGES`; what its reports lead with, `REPORT`; which models it takes,
`TAKES`.

Checked when the table is built: a task offers known forms (models/forms.py), and one that
generates text token by token (`decodes`) accepts only models that decode in the form they meet
it in (models/registry.py).
"""

from __future__ import annotations

from arithrepro.models.forms import FORMS, adapted_spec, meeting
from arithrepro.models.registry import MODELS
from arithrepro.tasks import abacus, charlm, expr, looped, modular
from arithrepro.tasks.base import GridTask, Task
from arithrepro.tasks.declared import Report, Stages, Takes

MODULES = {
    "expr": expr,
    "abacus": abacus,
    "looped": looped,
    "modular": modular,   # runs scored as they train (train-modular-<study>)
    "charlm": charlm,     # the same (train-charlm), then its own stages (charlm-*)
}

TASKS: dict[str, Task] = {n: m.TASK for n, m in MODULES.items()}
STAGES: dict[str, Stages] = {n: m.STAGES for n, m in MODULES.items()}
REPORTS: dict[str, Report] = {n: m.REPORT for n, m in MODULES.items()}
TAKES: dict[str, Takes] = {n: m.TAKES for n, m in MODULES.items()}
GRID_TASKS: dict[str, GridTask] = {n: t for n, t in TASKS.items() if t.grid}


def records(name: str) -> list[str]:
    """The folders of a task's records (its report's and the summary's inputs)."""
    from arithrepro.runs import records_dir

    return list(STAGES[name].records) or [str(records_dir(name))]


def wanted(name: str, params: dict, stages: tuple[str, ...] = ()) -> list:
    """The runs of task `name` the params ask for: those of the train `stages` alone, where
    given (a target that runs a few of the task's stages, `make modular-source`)."""
    runs = TASKS[name].runs(params)
    return [r for r in runs if r.config.stage in stages] if stages else runs


def tables(name: str) -> list[str]:
    """The tables a task's report writes."""
    return list(STAGES[name].tables) or [f"metrics/{name}.md"]


def models_of(task: Task) -> list[str]:
    """The registry models `task`'s own runs build: those it configures itself, else the grid
    models of its first form."""
    if TAKES[task.name].own:
        return list(TAKES[task.name].own)
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
        if (STAGES[name].make is None) != task.grid:
            raise TypeError(f"task registry: {name}: a grid task has its stages made for it; "
                            "any other declares them (STAGES.make)")
        unknown = [f for f in task.forms if f not in FORMS]
        if not task.forms or unknown:
            raise TypeError(f"task registry: {name} offers forms {task.forms}; known: "
                            f"{', '.join(FORMS)}")
        for model in models_of(task) + cross_models(task):
            spec = MODELS[model]
            met = meeting(spec, task.forms)
            takes = TAKES[name]
            if met is None or (takes.own and spec.grid):
                raise TypeError(f"task registry: {name} builds {model}, a {spec.form} model "
                                f"sized by {spec.sizes}; it offers {', '.join(task.forms)} and "
                                "takes models sized by the run")
            if takes.decodes and not adapted_spec(spec, met[1], met[0]).decodes:
                raise TypeError(f"task registry: {name} decodes token by token, but model "
                                f"{model} declares decodes=False")
            if spec.budget_fields and not _sets(spec):
                raise TypeError(f"task registry: {model} borrows "
                                f"{', '.join(spec.budget_fields)} from {spec.budget_from}, "
                                "which no grid task's schema declares with those fields")
            if takes.priced and not spec.cost:
                raise TypeError(f"task registry: {name} prices its models, but {model} "
                                "declares no cost formula")


def _sets(spec) -> bool:
    """Whether the block a model borrows its budget fields from is a grid task's, with them."""
    task, _, block = spec.budget_from.partition(".")
    owner = GRID_TASKS.get(task)
    fields = owner.params_schema().get(block, {}) if owner else {}
    return isinstance(fields, dict) and set(spec.budget_fields) <= set(fields)


_check()
