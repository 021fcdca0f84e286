"""report: one task's tables and figures from its run records."""

from __future__ import annotations

import click

from arithrepro.runs import METRICS, PLOTS, data_dir, evaluations_dir
from arithrepro.stages.common import TaskName, done, friendly_errors, params_option


@click.command("render-figures")
@click.option("--task", required=True, type=TaskName(), help="The task.")
@params_option
@friendly_errors
def report(task: str, params_path: str) -> None:
    """Write one task's tables and figures.

    Reads the record of every run of the task the params ask for (params: the lists that name
    its runs), and what its figures read (arithrepro/report/figures.py: plots/<task>/eval,
    data/<task>/, ...). Writes metrics/<task>.md (modular: also metrics/modular.tex) and the
    figures under plots/<task>/.
    """
    from arithrepro import config
    from arithrepro.report.figures import FIGURES
    from arithrepro.report.tables import summary_csv, wanted_runs, write_task_tables

    params = config.load(params_path)
    config.known_task(task)
    df = wanted_runs(params, [task])
    written = write_task_tables(METRICS, task, df)
    if task in FIGURES:
        written += FIGURES[task].render(summary_csv(df), evaluations_dir(task), data_dir(task),
                                        PLOTS / task)
    done(f"render-figures-{task}: {len(df)} runs -> " + ", ".join(str(p) for p in written))
