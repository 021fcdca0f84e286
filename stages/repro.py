"""repro (not a stage): the pipeline, with stages side by side (arithrepro/repro.py)."""

from __future__ import annotations

import click

from arithrepro.stages.common import friendly_errors, params_option


@click.command("repro")
@params_option
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Stages at once (default: one per core on a CPU, 1 on a GPU); the cores are "
                   "shared out as torch threads.")
@click.option("--ensemble/--no-ensemble", default=None,
              help="Train the pending seeds of each configuration, with those of the "
                   "configurations that differ from it in rate, decay or data alone, as one "
                   "ensemble per process (2-4x on a GPU, break-even on a CPU). Default: on where the stages train on "
                   "a GPU (not with --pull, nor in fp16), off on a CPU.")
@click.option("--dry", is_flag=True,
              help="Say which stages would run, in the order they would start, and run none.")
@click.option("--pull", is_flag=True,
              help="Restore each stage from the DVC remote where it (or its run cache) holds "
                   "the stage's outputs, and run only the others: `dvc repro --pull`, stage by "
                   "stage.")
@click.option("--max-hours", type=click.FloatRange(min=0), default=12.0, show_default=True,
              help="Training projected on this machine beyond this many hours (the jobs at "
                   "once counted) asks before it starts; without a terminal, it stops.")
@click.option("--yes", is_flag=True, help="Start whatever the projection says.")
@click.option("--per-gpu", type=click.IntRange(min=1), default=1, show_default=True,
              help="On a GPU machine, stages at once on each GPU (each stage sees its GPU only); "
                   "-j instead sets the total, dealt round the GPUs.")
@click.option("--process-per-stage", is_flag=True,
              help="Start every stage's commands as processes of their own, as `dvc repro` "
                   "does (default: a worker per job slot runs them, loading Python, DVC and "
                   "torch once).")
@click.option("--executor", type=click.Choice(["slurm", "local"]), default=None,
              help="Train the pending cells as batch jobs through submitit: slurm, or local "
                   "(the same jobs as processes here, -j at once). What they need is made here "
                   "first, the jobs exchange everything through the DVC remote, and the reports "
                   "run here once every cell is in (docs/cluster.md).")
@click.option("--slurm", "slurm_options", multiple=True, metavar="KEY=VALUE",
              help="A parameter of the jobs' sbatch (submitit's SLURM executor): "
                   "partition=gpu, account=lab, qos=..., time=MINUTES, cpus_per_task=N, "
                   "mem=32G, gpus_per_node=0, array_parallelism=N; setup and "
                   "additional_parameters as JSON.")
@click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True,
              help="With --executor: times a failed or preempted job is sent again (it "
                   "resumes from its checkpoint).")
@click.argument("targets", nargs=-1)
@friendly_errors
def repro(params_path: str, jobs: int | None, ensemble: bool | None, dry: bool, pull: bool,
          max_hours: float, yes: bool, per_gpu: int, process_per_stage: bool,
          executor: str | None, slurm_options: tuple[str, ...], retries: int,
          targets: tuple[str, ...]) -> None:
    """Run every stage of dvc.yaml that `dvc repro [TARGETS]` would run, several at once where
    the graph allows: each as its own `dvc repro --single-item`, so DVC caches and locks it as usual and a
    plain `dvc repro` afterwards finds everything up to date. With several jobs, each stage's
    output goes to logs/repro/<stage>.log and one line reports its start and end, with the
    stages done and the time left.

    Before training, a few steps of each run shape to train are timed (as `arithrepro
    estimate` does; not those of runs under 32 steps): --dry prints each stage's projected
    time, and a plan projected beyond --max-hours asks first. `dvc exp run` and `dvc repro`
    check nothing: run `arithrepro estimate --profile P` before them.

    With --executor the training cells run as batch jobs instead, each in a checkout of its
    own, and the workspace collects them from the DVC remote (docs/cluster.md)."""
    import sys

    from arithrepro import config
    from arithrepro.device import visible_gpus
    from arithrepro.repro import reproduce
    from arithrepro.schedule import ensemble_default

    from dvc.exceptions import DvcException

    from pathlib import Path

    if pull and ensemble:
        raise click.UsageError("--pull with --ensemble: an ensemble trains its seeds in one "
                               "process and cannot restore them one by one; pull first "
                               "(`arithrepro repro --pull`), then train with --ensemble")
    options = _options(slurm_options, executor)
    if executor and (dry or pull):
        raise click.UsageError(f"--executor with --{'dry' if dry else 'pull'}: the jobs "
                               "restore what the remote holds themselves; --dry without "
                               "--executor says what would run")
    params = config.load(params_path, record=False) if Path(params_path).exists() else None
    device = params["device"] if params else "cpu"
    # SLURM jobs with device cuda train on the cluster's GPUs, whatever this login node has
    here = config.resolve_device("auto" if executor == "slurm" and device == "cuda" else device)
    gpus = visible_gpus() if here != "cpu" else []
    if executor:
        from arithrepro import cluster

        cluster.check(executor, options)
        gpu_jobs = cluster.wants_gpu(executor, device, here, options.get("partition"))
    else:
        gpu_jobs = False
    if ensemble is None:
        jobs_on = ("cuda" if gpu_jobs else "cpu") if executor == "slurm" else here
        ensemble = bool(params) and ensemble_default(params, jobs_on, pull)
    # this machine's projection sets the jobs' time limits only where it is the jobs' kind, and
    # the limit is not the user's own (--slurm time=MINUTES)
    like_here = (executor != "slurm" or gpu_jobs == (here != "cpu")) \
        and not {"time", "timeout_min"} & set(options)
    try:
        if executor:
            code = cluster.reproduce(
                executor, targets, ensemble, cpu=params["cpu"] if params else None,
                options=options, gpu=gpu_jobs, at_once=jobs, retries=retries,
                projected=_projected(params) if params and like_here else None,
                workers_in_process=not process_per_stage)
        else:
            code = reproduce(jobs, ensemble, targets, workers_in_process=not process_per_stage,
                             cpu=params["cpu"] if params else None, dry=dry, pull=pull,
                             projected=_projected(params, min_steps=TIMED_FROM_STEPS)
                             if params else None,
                             check=None if yes or not params else _check(params, max_hours),
                             gpus=gpus, per_gpu=per_gpu)
    except DvcException as err:   # a broken dvc.yaml, a held lock: DVC's own one line
        raise ValueError(f"dvc: {err}") from None
    except LookupError as err:    # a target dvc.yaml lacks: the command line is wrong
        raise click.UsageError(str(err)) from None
    sys.exit(code)


def _options(pairs: tuple[str, ...], executor: str | None) -> dict[str, str]:
    """--slurm KEY=VALUE pairs, refused before anything runs when malformed or without slurm."""
    if pairs and executor != "slurm":
        raise click.UsageError("--slurm is for --executor slurm")
    options = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise click.UsageError(f"--slurm {pair}: expected KEY=VALUE (e.g. partition=gpu)")
        options[key.strip().removeprefix("slurm_")] = value.strip()
    return options


# Timing a configuration runs four of its steps and a validation pass: for a run of a few dozen
# steps that is a good part of the run itself. Here such runs go untimed; the time left counts
# them at the pace of the stages that finished. (A cluster's time limits time every run.)
TIMED_FROM_STEPS = 32


def _projected(params: dict, stop_after_s: float | None = None, say: bool = True,
               min_steps: int = 0):
    """{stage: its runs.Run} -> {stage: projected training seconds on this machine}, two
    untimed and two timed steps per configuration; the runs of fewer than `min_steps` steps
    are left out."""
    def projected(training: dict) -> dict[str, float]:
        from arithrepro.projection import project

        wanted = {run.cell for run in training.values()}
        echo = (lambda line: click.echo(f"repro: {line}", err=True)) if say else (lambda line: None)
        rows = project(params, sorted({run.task for run in training.values()}), warmup=2,
                       steps=2, keep=lambda run: run.cell in wanted, echo=echo,
                       stop_after_s=stop_after_s, min_steps=min_steps)
        per_cell = {r.cell: row.run_s for row, runs in rows for r in runs}
        short = len(wanted - per_cell.keys())
        if short and min_steps:
            echo(f"not timing {short} run{'s' if short > 1 else ''} of fewer than {min_steps} "
                 "steps (timing one costs about as much as running it)")
        return {stage: per_cell[run.cell] for stage, run in training.items()
                if run.cell in per_cell}

    return projected


def _check(params: dict, max_hours: float):
    """Refuses (or, at a terminal, asks about) training projected beyond `max_hours` of wall
    time with the jobs at once."""
    def check(training: dict, at_once: int) -> dict[str, float]:
        import sys

        from arithrepro.estimate import hours

        limit = max_hours * 3600
        seconds = _projected(params, stop_after_s=limit * at_once, say=False,
                             min_steps=TIMED_FROM_STEPS)(training)
        wall = sum(seconds.values()) / at_once
        if wall <= limit:
            return seconds
        more = "at least " if len(seconds) < len(training) else ""
        what = (f"training projected on this machine at {more}{hours(wall)} ({len(training)} runs, "
                f"{at_once} at once; profile {params.get('profile', '?')}), beyond --max-hours "
                f"{max_hours:g}")
        if not sys.stdin.isatty():
            raise ValueError(f"{what}: --yes starts it anyway, `arithrepro estimate` gives the detail")
        click.confirm(f"{what}. Start?", abort=True, err=True)
        return seconds

    return check
