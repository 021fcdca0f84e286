"""repro (not a stage): the pipeline, with stages side by side (arithrepro/repro.py)."""

from __future__ import annotations

import click

from arithrepro.stages.common import friendly_errors, params_option


@click.command("repro")
@params_option
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Stages at once (default: one per core on a CPU, 1 on a GPU); the cores are "
                   "shared out as torch threads.")
@click.option("--ensemble", is_flag=True,
              help="Train the pending seeds of each configuration as one ensemble per process "
                   "(the form that pays on a GPU; on a CPU it breaks even).")
@click.option("--dry", is_flag=True,
              help="Say which stages would run, in the order they would start, and run none.")
@click.option("--process-per-stage", is_flag=True,
              help="Start every stage's commands as processes of their own, as `dvc repro` "
                   "does (default: a worker per job slot runs them, loading Python, DVC and "
                   "torch once).")
@click.argument("targets", nargs=-1)
@friendly_errors
def repro(params_path: str, jobs: int | None, ensemble: bool, dry: bool,
          process_per_stage: bool, targets: tuple[str, ...]) -> None:
    """Run every stage of dvc.yaml that `dvc repro [TARGETS]` would run, several at once where
    the graph allows: each as its own `dvc repro --single-item`, so DVC caches and locks it as usual and a
    plain `dvc repro` afterwards finds everything up to date. With several jobs, each stage's
    output goes to logs/repro/<stage>.log and one line reports its start and end."""
    import sys

    from arithrepro import config
    from arithrepro.repro import reproduce

    from dvc.exceptions import DvcException

    from pathlib import Path

    params = config.load(params_path, record=False) if Path(params_path).exists() else None
    if jobs is None and params and config.resolve_device(params["device"]) != "cpu":
        jobs = 1
    try:
        code = reproduce(jobs, ensemble, targets, workers_in_process=not process_per_stage,
                         cpu=params["cpu"] if params else None, dry=dry)
    except DvcException as err:   # a broken dvc.yaml, a held lock: DVC's own one line
        raise ValueError(f"dvc: {err}") from None
    sys.exit(code)
