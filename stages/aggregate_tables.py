"""aggregate-tables: every run record -> metrics/summary.{json,csv} and a markdown table per task."""

from __future__ import annotations

import click

from arithrepro.stages.common import done, friendly_errors, params_option, paths, rebuild_command


@click.command("aggregate-tables")
@params_option
@friendly_errors
def aggregate_tables(params_path: str) -> None:
    """Collect the run records of every task into one summary.

    Reads the record of every run the params ask for, metrics/<task>/runs/[<study>/]<run>.json
    (params: the lists that name the runs: <task>.{models,sizes,seeds} of a grid task,
    modular.studies, charlm.{models,schedules,seeds}). Writes metrics/headline.json (each task's headline metrics, mean and std over
    seeds per model and size: what `dvc metrics show` and `dvc exp show` display),
    metrics/summary.json ({task: {"<model>-<size>-<seed>": {metric: value}}}),
    metrics/summary.csv (one row per run) and metrics/<task>.md (mean ± std over seeds).
    """
    from arithrepro import config
    from arithrepro.report.tables import write_all
    from arithrepro.tasks.registry import TASKS

    params = config.load(params_path)
    wanted = {name: [spec.record for spec in t.runs(params)] for name, t in TASKS.items()}
    headline = {name: (t.headline, t.headline_sizes) for name, t in TASKS.items()}
    try:
        line = write_all(paths.metrics, list(TASKS), headline, wanted)
    except FileNotFoundError as err:
        if err.filename is None:
            raise
        stage = (rebuild_command(err.filename) or "dvc repro").replace(" -f -s", "")
        raise FileNotFoundError(f"{err.filename}: missing; run `{stage}`") from None
    done(f"aggregate-tables: {line}")
