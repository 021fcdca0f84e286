"""estimate: how long each profile's training takes on this machine, before running it.

Not a pipeline stage: a command to run before `dvc repro` or `dvc exp run -S profile=paper`.
"""

from __future__ import annotations

from dataclasses import asdict

import click

from arithrepro.stages.common import TaskName, friendly_errors


@click.command("estimate")
@click.option("--conf", "conf_dir", default="conf", show_default=True,
              type=click.Path(file_okay=False), help="The params' source (config.yaml, profile/).")
@click.option("--profile", "profiles", multiple=True,
              help="A profile to project (repeatable). Default: every profile in conf/profile/.")
@click.option("-S", "--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="An override on every profile, as `dvc exp run -S` takes it (repeatable).")
@click.option("--task", "tasks", multiple=True,
              type=TaskName(check=True),
              help="Only these tasks (repeatable). Default: all.")
@click.option("--steps", default=5, show_default=True, type=click.IntRange(1),
              help="Timed training steps per run shape.")
@click.option("--warmup", default=3, show_default=True, type=click.IntRange(1),
              help="Untimed steps first (allocation, torch.compile).")
@click.option("--gpus", type=click.IntRange(min=1), default=None,
              help="Devices the runs share out (a node's GPUs, or a cluster's at once): the wall "
                   "time beside the device-hours. Default: this machine's GPUs on a GPU, else 1.")
@click.option("--ensemble/--no-ensemble", default=None,
              help="Time each configuration's seeds as one ensemble, with those of the "
                   "configurations that differ from it in rate, decay or data alone, as "
                   "`arithrepro repro` trains them. Default: as repro does on this device (on a "
                   "GPU, not in fp16).")
@click.option("--per-gpu", type=click.IntRange(min=1), default=1, show_default=True,
              help="Jobs sharing each device, as `arithrepro repro --per-gpu`: the wall time "
                   "packs the jobs into devices x K slots, each as fast as alone (a lower bound "
                   "where they contend).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Also write the projections here as JSON.")
@friendly_errors
def estimate(conf_dir: str, profiles: tuple, overrides: tuple, tasks: tuple, steps: int,
             warmup: int, gpus: int | None, ensemble: bool | None, per_gpu: int,
             json_path: str | None) -> None:
    """Time a few training steps of every run shape of each profile on this machine (the
    params' device, precision and compile) and print the projected training time of every job
    (a run, or with --ensemble a configuration's seeds as one ensemble, as `arithrepro repro`
    trains them), task and profile; then each profile's device-hours, its longest job, and its
    wall time with the jobs dealt longest first to --gpus devices x --per-gpu slots (a node, or
    a cluster's jobs at once). Counts training steps and validation passes; not data
    generation, evaluation or DVC's own time.

    Reads each profile's params, composed from conf/ as `dvc exp run -S profile=<p>` composes
    them; writes nothing but --json.
    """
    from arithrepro import config
    from arithrepro.estimate import hours, makespan
    from arithrepro.io import write_json
    from arithrepro.projection import placement, project
    from arithrepro.schedule import ensemble_default
    from arithrepro.tasks.registry import TASKS

    known = config.profiles(conf_dir)
    for p in profiles:
        if p not in known:
            raise config.ParamsError(f"--profile {p}: not in {conf_dir}/profile/; "
                                     f"allowed: {', '.join(known)}")
    composed = {p: config.compose([f"profile={p}", *overrides], conf_dir)
                for p in profiles or known}
    params = next(iter(composed.values()))
    device, precisions = placement(params)
    graphs = config.resolve_graphs(params["graphs"], device, "fp32")
    where = (f"{device}, {_precision_note(precisions)}, "
             f"{'compiled' if params['compile'] else 'CUDA graphs' if graphs else 'eager'}")
    if gpus is None:
        from arithrepro.device import visible_gpus

        gpus = max(1, len(visible_gpus())) if device != "cpu" else 1
    if ensemble is None:
        ensemble = ensemble_default(params, device, pull=False)
    slots = gpus * per_gpu
    timings: dict = {}
    report, out = [], {}
    for profile, p in composed.items():
        rows = [row for row, _ in project(
            p, tasks or tuple(TASKS), warmup, steps, timings=timings, ensemble=ensemble,
            echo=lambda line, profile=profile: click.echo(
                f"estimate: {line.replace('timing', f'timing {profile}', 1)}", err=True))]
        out[profile] = [{**asdict(r), "jobs": r.jobs, "run_s": r.run_s, "total_s": r.total_s}
                        for r in rows]
        report.append(_table(profile, rows, hours))
    jobs_word = ("each configuration's seeds as one ensemble (one job), with those of the "
                 "configurations that differ from it in rate, decay or data alone" if ensemble
                 else "each run alone (one job)")
    click.echo(f"# Projected training time on {where}\n\n{warmup} untimed and {steps} timed "
               f"steps per run shape; {jobs_word}; training steps and "
               f"validation passes only (not data generation, evaluation or DVC).\n")
    click.echo("\n".join(report))
    unit = "GPU" if device != "cpu" else "device"
    click.echo(f"| profile | runs | jobs | {unit}-hours | longest job | on {gpus} {unit}"
               f"{'s' if gpus > 1 else ''}{f' x {per_gpu} slots' if per_gpu > 1 else ''} |\n"
               "|---|---:|---:|---:|---:|---:|")
    walls = {}
    for profile, rows in out.items():
        each = [r["run_s"] for r in rows for _ in range(r["jobs"])]
        walls[profile] = makespan(each, slots)
        click.echo(f"| {profile} | {sum(r['runs'] for r in rows)} | {len(each)} | "
                   f"{hours(sum(each))} | {hours(max(each, default=0))} | {hours(walls[profile])} |")
    click.echo(f"\n(the jobs dealt to {slots} slot{'s' if slots > 1 else ''} at once, longest "
               "first, as `arithrepro repro` starts them; data generation and evaluation not "
               "counted" + (f"; {per_gpu} jobs per {unit} counted as fast as one alone, which "
                            "they are not where they contend" if per_gpu > 1 else "") + ")")
    if json_path:
        from arithrepro.provenance import accelerator

        write_json(json_path, {"device": device, "gpu": accelerator(device)["gpu"],
                               "precision": precisions,
                               "compile": params["compile"], "graphs": graphs,
                               "warmup": warmup, "steps": steps, "devices": gpus,
                               "per_gpu": per_gpu, "ensemble": ensemble,
                               "wall_s": walls, "profiles": out})


def _table(profile: str, rows: list, hours) -> str:
    lines = [f"## {profile}\n", "| task | run | runs | together | steps | ms/step | validations | "
             "s/validation | per job | total |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.task} | {r.label} | {r.runs} | {r.members if r.members > 1 else '–'} "
                     f"| {r.steps:,} | {1000 * r.timing.step_s:.1f} "
                     f"| {r.validations:,} | {r.timing.validation_s:.2f} | {hours(r.run_s)} "
                     f"| {hours(r.total_s)} |")
    per_task = {}
    for r in rows:
        per_task[r.task] = per_task.get(r.task, 0.0) + r.total_s
    total = sum(per_task.values())
    lines.append(f"| **all** | {', '.join(f'{t} {hours(s)}' for t, s in per_task.items())} | "
                 f"{sum(r.runs for r in rows)} | | | | | | | **{hours(total)}** |\n")
    return "\n".join(lines)


def _precision_note(precisions: dict) -> str:
    kinds = set(precisions.values())
    if len(kinds) == 1:
        return kinds.pop()
    return ", ".join(f"{t} {p}" for t, p in precisions.items())
