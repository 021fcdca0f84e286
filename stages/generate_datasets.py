"""generate-datasets: write a task's data splits under data/<task>/."""

from __future__ import annotations

import time

import click

from arithrepro.runs import data_dir
from arithrepro.stages.common import TaskName, done, friendly_errors, params_option


@click.command("generate-datasets")
@params_option
@click.option("--task", required=True, type=TaskName(grid=True), help="A grid task.")
@friendly_errors
def generate_datasets(params_path: str, task: str) -> None:
    """Generate a task's datasets, deterministic from their seeds.

    Reads params: <task>.data.
    Writes data/<task>/ (expr: {train,valid,test,ood}.parquet, lengths.csv, meta.json;
    abacus: {grid,valid}.parquet, meta.json; looped: {eval,valid}.parquet, meta.json).
    """
    from tqdm import tqdm

    from arithrepro import config
    from arithrepro.tasks.registry import TASKS

    params = config.load(params_path)
    grid = [t for t, spec in TASKS.items() if spec.grid]
    if task not in grid:
        raise config.ParamsError(f"--task = {task!r}: expected one of {', '.join(grid)}"
                                 + (f" ({task} builds its data in its own stages)" if task in TASKS else ""))
    t0 = time.perf_counter()
    total = TASKS[task].generate_count(params)
    with tqdm(total=total, desc=f"generate {task}", unit="problem", unit_scale=True,
              dynamic_ncols=True) as bar:
        summary = TASKS[task].generate(params, data_dir(task), progress=bar.update)
    done(f"generate-datasets {task}: {summary} in {time.perf_counter() - t0:.1f} s")
