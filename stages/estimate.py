"""estimate: how long each profile's training takes on this machine, before running it.

Not a pipeline stage: a command to run before `dvc repro` or `dvc exp run -S profile=paper`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Callable

import click

from arithrepro.device import resolve_device, resolve_precision
from arithrepro.stages.common import TaskName, friendly_errors

@dataclass
class Job:
    """A run and its seeds: `build()` -> the run (runs.Built) on data made in memory."""
    task: str
    label: str
    runs: int
    build: Callable


@click.command("estimate")
@click.option("--conf", "conf_dir", default="conf", show_default=True,
              type=click.Path(file_okay=False), help="The params' source (config.yaml, profile/).")
@click.option("--profile", "profiles", multiple=True,
              help="A profile to project (repeatable). Default: every profile in conf/profile/.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="An override on every profile, as `dvc exp run -S` takes it (repeatable).")
@click.option("--task", "tasks", multiple=True,
              type=TaskName(check=True),
              help="Only these tasks (repeatable). Default: all.")
@click.option("--steps", default=5, show_default=True, type=click.IntRange(1),
              help="Timed training steps per run shape.")
@click.option("--warmup", default=3, show_default=True, type=click.IntRange(1),
              help="Untimed steps first (allocation, torch.compile).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Also write the projections here as JSON.")
@friendly_errors
def estimate(conf_dir: str, profiles: tuple, overrides: tuple, tasks: tuple, steps: int,
             warmup: int, json_path: str | None) -> None:
    """Time a few training steps of every run shape of each profile on this machine (the
    params' device, precision and compile) and print the projected training time of every run,
    task and profile: one device, one run at a time. Counts training steps and validation
    passes; not data generation, evaluation or DVC's own time.

    Reads each profile's params, composed from conf/ as `dvc exp run -S profile=<p>` composes
    them; writes nothing but --json.
    """
    from arithrepro import config
    from arithrepro.estimate import Projection, Timing, hours, time_steps, validations
    from arithrepro.io import write_json
    from arithrepro.models.registry import spec_of
    from arithrepro.tasks.registry import TASKS

    known = config.profiles(conf_dir)
    for p in profiles:
        if p not in known:
            raise config.ParamsError(f"--profile {p}: not in {conf_dir}/profile/; "
                                     f"allowed: {', '.join(known)}")
    composed = {p: config.compose([f"profile={p}", *overrides], conf_dir)
                for p in profiles or known}
    params = next(iter(composed.values()))
    device = resolve_device(params["device"])
    precisions = {t: resolve_precision(params["precision"], device, task.precision)
                  for t, task in TASKS.items()}
    where = (f"{device}, {_precision_note(precisions)}, "
             f"{'compiled' if params['compile'] else 'eager'}")
    timings: dict[str, Timing] = {}
    report, out = [], {}
    for profile, p in composed.items():
        rows = []
        for job in _jobs(p, tasks or tuple(TASKS), device, precisions):
            built = job.build()
            key = _shape(job.task, built, p["compile"])
            if key not in timings:
                click.echo(f"estimate: timing {profile} {job.task} {job.label}", err=True)
                timer = _validation(built, device)
                timings[key] = Timing(time_steps(built.net, built.data.batches, built.cfg, warmup,
                                                 steps, spec_of(built.arch)),
                                      timer(built.net))
            rows.append(Projection(job.task, job.label, job.runs, built.data.batches.steps,
                                   validations(built.data.batches, built.cfg), timings[key]))
            del built
        out[profile] = [{**asdict(r), "run_s": r.run_s, "total_s": r.total_s} for r in rows]
        report.append(_table(profile, rows, hours))
    click.echo(f"# Projected training time on {where}\n\n{warmup} untimed and {steps} timed "
               f"steps per run shape; one run at a time on one device; training steps and "
               f"validation passes only (not data generation, evaluation or DVC).\n")
    click.echo("\n".join(report))
    click.echo("| profile | runs | projected |\n|---|---:|---:|")
    for profile, rows in out.items():
        click.echo(f"| {profile} | {sum(r['runs'] for r in rows)} | "
                   f"{hours(sum(r['total_s'] for r in rows))} |")
    if json_path:
        write_json(json_path, {"device": device, "precision": precisions,
                               "compile": params["compile"], "warmup": warmup, "steps": steps,
                               "profiles": out})


def _table(profile: str, rows: list, hours) -> str:
    lines = [f"## {profile}\n", "| task | run | runs | steps | ms/step | validations | "
             "s/validation | per run | total |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.task} | {r.label} | {r.runs} | {r.steps:,} | {1000 * r.timing.step_s:.1f} "
                     f"| {r.validations:,} | {r.timing.validation_s:.2f} | {hours(r.run_s)} "
                     f"| {hours(r.total_s)} |")
    per_task = {}
    for r in rows:
        per_task[r.task] = per_task.get(r.task, 0.0) + r.total_s
    total = sum(per_task.values())
    lines.append(f"| **all** | {', '.join(f'{t} {hours(s)}' for t, s in per_task.items())} | "
                 f"{sum(r.runs for r in rows)} | | | | | | **{hours(total)}** |\n")
    return "\n".join(lines)


def _precision_note(precisions: dict) -> str:
    kinds = set(precisions.values())
    if len(kinds) == 1:
        return kinds.pop()
    return ", ".join(f"{t} {p}" for t, p in precisions.items())


def _jobs(params: dict, tasks, device: str, precisions: dict):
    """Every run shape of the params: a task's runs that differ in their seed only are one
    job, built on data made in memory (runs.build's trial)."""
    from arithrepro import bench
    from arithrepro.runs import Placement, build
    from arithrepro.tasks.registry import TASKS

    for name in tasks:
        task = TASKS[name]
        where = Placement(device, precisions[name], params["compile"],
                          bool(params["graphs"]) and device.startswith("cuda"))
        groups = {}
        for run in [*task.runs(params), *(bench.runs(task, params) if task.grid else [])]:
            groups.setdefault((run.home, run.group, run.model, run.label), []).append(run)
        for runs in groups.values():
            run = runs[0]
            yield Job(name, f"{run.model}-{run.label}" + (" (bench)" if run.home else ""),
                      len(runs), lambda run=run, task=task, where=where:
                      build(task, run, params, where, trial=True))


def _shape(task: str, built, compile_) -> str:
    """What a step's time depends on: the architecture, the batch's shape, the loop's
    settings that change a step's work (not its seed, learning rate or length)."""
    cfg = built.cfg
    x = built.data.batches(0)[0]
    return json.dumps([task, {k: v for k, v in built.arch.items() if k != "vocab"}, list(x.shape),
                       cfg.optimizer, cfg.precision, cfg.micro_batches, cfg.progressive,
                       cfg.outputs_from, cfg.eval_batch_size, compile_], sort_keys=True, default=str)


def _validation(built, device: str):
    """The validation timer of a run: seconds of one pass over its validation set."""
    import torch

    from arithrepro.estimate import forward_seconds, time_call

    if callable(built.data.valid):   # the task's own validation (modular): timed as it runs
        def timer(net):
            net.eval()
            try:
                return time_call(lambda: built.data.valid(net), torch.device(device))
            finally:
                net.train()

        return timer
    make_batch, n = built.data.valid
    x = make_batch(torch.arange(min(built.cfg.eval_batch_size, n)))[0]
    return lambda net: forward_seconds(net, x, built.cfg.precision) * n
