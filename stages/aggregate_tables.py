"""aggregate-tables: every task's run records -> metrics/summary.{json,csv} and headline.json."""

from __future__ import annotations

import click

from arithrepro.runs import METRICS
from arithrepro.stages.common import done, friendly_errors, params_option


@click.command("aggregate-tables")
@params_option
@friendly_errors
def aggregate_tables(params_path: str) -> None:
    """Collect the run records of every task into one summary.

    Reads the record of every run the params ask for, metrics/<task>/runs/[<study>/]<run>.json
    (params: the lists that name each task's runs, STAGES' `run_keys`). Writes
    metrics/headline.json (each task's headline metrics, mean and std over seeds per model and
    size: what `dvc metrics show` and `dvc exp show` display), metrics/summary.json
    ({task: {"<model>-<size>-<seed>": {metric: value}}}) and metrics/summary.csv (one row per
    run). Each task's own tables and figures are its render-figures stage's (arithrepro render-figures).
    """
    from arithrepro import config
    from arithrepro.report.tables import describe, wanted_runs, write_summary
    from arithrepro.tasks.registry import REPORTS, TASKS

    params = config.load(params_path)
    df = wanted_runs(params, list(TASKS))
    written = write_summary(METRICS, df, REPORTS)
    done(f"aggregate-tables: {describe(df, list(TASKS), written)}")
