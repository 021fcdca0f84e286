"""The benchmark: every grid task against every grid model that takes its samples (docs/bench.md).

A grid task's own grid (<task>.models x sizes x seeds) trains the models of its first form. The
benchmark adds the cells across: each other grid model that meets the task (directly, or through
an adapter: models/forms.py), at the size bench.sizes names for it, for each of bench.seeds,
trained on the task's data under the task's own training block and scored by the task's own
evaluation. They are ordinary DVC cells, one matrix stage per (task, model), train-bench-<task>-
<model>@<seed> and evaluate-bench-<task>-<model>@<seed>, filed beside the task's own runs in
runs/<task>/bench/, metrics/<task>/bench/ and plots/<task>/bench/ (which the task's own reports
do not read), so adding a model or a task adds stages and retrains nothing else.
bench.seeds is empty unless the bench config group turns it on (`-S bench=grid`).

render-figures-bench writes the grid, task x model, from those records and, for a task's own models,
from the task's own records at the bench's size (the cells its own grid trained, none again):
metrics/bench.md and plots/bench/grid.png.
"""

from __future__ import annotations

from arithrepro.runs import Config, Run
from arithrepro.schema import Map, ParamsError, integer, list_of

HOME = "bench"


def _size_name(key, value) -> None:
    if not isinstance(value, str):
        raise ParamsError(f"{key} = {value!r}: expected a size name")


def schema() -> dict:
    """params.yaml's bench block (its sizes' keys are checked against the registry in check)."""
    return {"seeds": list_of(integer(0, 2**31 - 1), min_len=0), "sizes": Map(_size_name)}


def check(params: dict) -> None:
    """bench.sizes names one size of every grid model (and no other model)."""
    from arithrepro.models.registry import MODELS

    sizes = params["bench"]["sizes"]
    grid = [m for m, s in MODELS.items() if s.grid]
    for model in sizes:
        if model not in grid:
            raise ParamsError(f"bench.sizes.{model}: not a grid model; expected one of "
                              f"{', '.join(grid)}")
    for model in grid:
        if model not in sizes:
            raise ParamsError(f"bench.sizes: no size for {model}; add bench.sizes.{model}, one "
                              f"of models.{model}.sizes")
        known = params["models"][model]["sizes"]
        if sizes[model] not in known:
            raise ParamsError(f"bench.sizes.{model} = {sizes[model]!r}: expected one of "
                              f"{', '.join(known)} (models.{model}.sizes)")


def pairs() -> list[tuple[str, str]]:
    """(task, model) of every cell across: a grid task and a grid model of another form that
    meets it, in the registries' order (dvc.yaml's)."""
    from arithrepro.tasks.registry import GRID_TASKS, cross_models

    return [(t, m) for t, task in GRID_TASKS.items() for m in cross_models(task)]


def configs(task, params: dict) -> list[Config]:
    """The benchmark's configurations of `task` these params ask for (each model across at its
    bench.sizes size, over bench.seeds: none while bench.seeds is empty); like Task.configs,
    listing them reads the lists that name them, not their values."""
    from arithrepro.tasks.registry import cross_models

    from arithrepro.params_reads import unrecorded

    b, plain = params["bench"], unrecorded(params)
    return [task.config(plain, m, b["sizes"][m], HOME, seeds=b["seeds"])
            for m in cross_models(task)] if b["seeds"] else []


def runs(task, params: dict) -> list[Run]:
    """The benchmark's runs of `task`, in dvc.yaml's order."""
    return [run for c in configs(task, params) for run in c.runs]


def trained(task, params: dict) -> list[Config]:
    """Every configuration these params train on `task`: its own, then (a grid task's) the
    benchmark's, in dvc.yaml's order."""
    return [*task.configs(params), *(configs(task, params) if task.grid else [])]
