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

# The charlm timing corpus: random characters, as the real corpus (TinyStories) may be out of
# reach; the vocabulary only sizes the embedding and the output layer.
CHARLM_VOCAB = 96


@dataclass
class Job:
    """Runs of one shape: `build()` -> (model, the run's batches, loop config, validation timer)."""
    task: str
    label: str
    runs: int
    key: str        # runs with the same key take the same time per step and per validation
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
            net, batches, cfg, validation = job.build()
            if job.key not in timings:
                click.echo(f"estimate: timing {profile} {job.task} {job.label}", err=True)
                timings[job.key] = Timing(time_steps(net, batches, cfg, warmup, steps),
                                          validation(net))
            rows.append(Projection(job.task, job.label, job.runs, batches.steps,
                                   validations(batches, cfg), timings[job.key]))
            del net
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
    """Every run shape of the params, task by task."""
    from arithrepro.tasks.registry import TASKS

    for task in tasks:
        if TASKS[task].grid:
            yield from _grid_jobs(params, task, device, precisions[task])
        elif task == "modular":
            yield from _modular_jobs(params, device, precisions[task])
        else:
            yield from _charlm_jobs(params, device, precisions[task])


def _grid_jobs(params: dict, task: str, device: str, precision: str):
    from arithrepro.estimate import forward_seconds
    from arithrepro.models.registry import build_model
    from arithrepro.tasks.registry import TASKS

    t, seed = TASKS[task], params[task]["seeds"][0]
    batch = params[task]["train"]["batch_size"]
    for model in params[task]["models"]:
        for size in params[task]["sizes"]:
            arch, cfg = TASKS[task].cell(params, model, size, seed, precision)

            def build(arch=arch, cfg=cfg):
                import torch

                torch.manual_seed(seed)
                net = build_model(arch["model"], arch["size"], dropout=arch["dropout"],
                                  **arch["dims"]).to(device)
                batches = t.sample_batches(params, seed, device)
                rows = t.valid_count(params)
                # a validation batch: as many rows as the loop's validation batches hold
                n = min(cfg.eval_batch_size, rows)
                x = torch.cat([batches(i)[0] for i in range(-(-n // batch))])[:n]
                return net, batches, cfg, lambda net: forward_seconds(net, x, precision) * rows

            key = json.dumps([task, arch, batch, cfg.progressive, params["compile"]], sort_keys=True)
            yield Job(task, f"{model}-{size}", len(params[task]["seeds"]), key, build)


def _modular_jobs(params: dict, device: str, precision: str):
    from arithrepro.estimate import time_call
    from arithrepro.runs import Placement
    from arithrepro.tasks.modular import cell as study_cell, run_config, study_runs

    where = Placement(device, precision, bool(params["compile"]))
    for study in params["modular"]["studies"]:
        groups = {}  # a study's runs that differ only in their seed
        for run in study_runs(params, study):
            groups.setdefault((run.model, run.label), []).append(run)
        for runs in groups.values():
            run, c = runs[0], run_config(params, runs[0])
            shape = {k: c[k] for k in ("p", "orders", "operator", "r_train", "layers", "d_model",
                                       "heads", "batch_size")}

            def build(run=run, c=c):
                net, _, _, data, cfg, batches = study_cell(run, c, where)

                def validation(net):
                    import torch

                    net.eval()
                    try:
                        return time_call(lambda: data.evaluate(net), torch.device(device))
                    finally:
                        net.train()

                return net, batches, cfg, validation

            key = json.dumps(["modular", run.model, shape, params["compile"]], sort_keys=True)
            yield Job("modular", f"{run.model} {run.label}", len(runs), key, build)


def _charlm_jobs(params: dict, device: str, precision: str):
    import torch

    from arithrepro.estimate import forward_seconds
    from arithrepro.runs import Placement, RunSpec
    from arithrepro.tasks.charlm import run_arch, setup_run

    m = params["charlm"]
    where = Placement(device, precision, bool(params["compile"]))
    ids = torch.randint(CHARLM_VOCAB, (m["corpus"]["chars"],),
                        generator=torch.Generator().manual_seed(0))
    for name in m["models"]:
        for schedule in m["schedules"]:
            run = RunSpec("charlm", name, schedule, m["seeds"][0])

            def build(run=run):
                net, _, _, _, data, cfg, batches, _ = setup_run(run, params, ids, CHARLM_VOCAB, where)
                x = data.val[:cfg.eval_batch_size, :-1]  # a validation batch's inputs
                return net, batches, cfg, lambda net: forward_seconds(net, x, precision) * len(data.val)

            model, size = run_arch(params, run)
            T = m["schedule"][schedule]["seq_length"]
            key = json.dumps(["charlm", model, size, T, m["train"]["batch_size"], params["compile"]],
                             sort_keys=True)
            yield Job("charlm", f"{name} T={T}", len(m["seeds"]), key, build)
