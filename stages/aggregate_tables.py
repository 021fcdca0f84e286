"""aggregate-tables: every run record -> metrics/summary.{json,csv} and a markdown table per task."""

from __future__ import annotations

import click

from arithrepro.stages.common import done, friendly_errors, params_option, paths


@click.command("aggregate-tables")
@params_option
@friendly_errors
def aggregate_tables(params_path: str) -> None:
    """Collect the run records of every task into one summary.

    Reads metrics/<task>/runs/*.json for each task in the registry (params.yaml is only
    validated). Writes metrics/headline.json (each task's headline metrics, mean and std over
    seeds per model and size: what `dvc metrics show` and `dvc exp show` display),
    metrics/summary.json ({task: {"<model>-<size>-<seed>": {metric: value}}}),
    metrics/summary.csv (one row per run) and metrics/<task>.md (mean ± std over seeds).
    """
    from arithrepro import config
    from arithrepro.report.tables import write_all
    from arithrepro.tasks.registry import TASKS

    config.load(params_path)
    headline = {name: (t.headline, t.headline_sizes) for name, t in TASKS.items()}
    done(f"aggregate-tables: {write_all(paths.metrics, list(TASKS), headline)}")
