"""evaluate: one trained run on its task's evaluation sets."""

from __future__ import annotations

import click

from arithrepro.stages.common import (TaskName, data_params, done, friendly_errors,
                                     params_option, paths)


@click.command("evaluate")
@params_option
@click.option("--task", required=True, type=TaskName(grid=True), help="A grid task.")
@click.option("--bench", is_flag=True, help="RUN is a benchmark run (arithrepro/bench.py).")
@click.argument("name", metavar="RUN")
@friendly_errors
def evaluate(params_path: str, task: str, bench: bool, name: str) -> None:
    """Score the trained RUN (<model>-<size>-<seed>, as `arithrepro train` names it): expr decodes the test and OOD sets (greedy, cached); abacus
    decodes the digits x digits grid at each inference recurrence count; looped classifies
    every position at each evaluation length.

    Reads params: device, cpu, <task>.{eval,data};
    runs/<task>/<cell>/{model.pt,train.json}; data/<task>/.
    Writes metrics/<task>/runs/<cell>.json (the run's record: params, accuracies,
    best_val_loss, train_seconds, ...) and plots/<task>/eval/<cell>.csv; a benchmark cell,
    the same under runs/bench/, metrics/bench/ and plots/bench/.
    """
    import time

    import pandas as pd
    from tqdm import tqdm

    from arithrepro import config, cpu
    from arithrepro.io import read_json, write_frame, write_json
    from arithrepro.models.registry import load_model
    from arithrepro.provenance import provenance
    from arithrepro.tasks.registry import TASKS

    from arithrepro import bench as benchmark
    from arithrepro import runs
    from arithrepro.params_reads import unrecorded

    params = config.load(params_path)
    cpu.apply(params["cpu"])
    config.grid_task(task)
    t = TASKS[task]
    among = benchmark.runs(t, unrecorded(params)) if bench else None
    spec = runs.find(t, unrecorded(params), name, among)
    run_dir = spec.dir
    ckpt = run_dir / "model.pt"
    if not ckpt.is_file():
        raise FileNotFoundError(f"{ckpt}: missing; run `arithrepro train` for this run first")
    net, _ = load_model(ckpt)
    device = config.device_of(params)
    net.to(device).eval()
    summary = run_dir / "train.json"
    if not summary.is_file():
        raise FileNotFoundError(f"{summary}: missing; run `arithrepro train` for this run first")
    record = dict(read_json(summary, ("task", "model", "size", "seed")))
    origin = record.pop("provenance", {})  # the training's, put back last beside this run's
    # scoring runs without autocast, in fp32 whatever the training's precision
    origin["evaluate"] = provenance({"eval": params[task]["eval"],
                                     "data": data_params(params, task)},
                                    device=device, precision="fp32")
    t0 = time.perf_counter()
    with tqdm(total=t.eval_count(params, net), desc=f"evaluate {task} {spec.name}", unit="problem",
              dynamic_ncols=True) as bar:
        metrics, rows = t.evaluate(net, params, paths.data(task), device, progress=bar.update)
    record.update(metrics)
    record["eval_seconds"] = time.perf_counter() - t0
    record["provenance"] = origin
    write_frame(spec.evaluation, pd.DataFrame(rows))
    write_json(spec.record, record)
    shown = ", ".join(f"{k} {100 * record[k]:.2f} %" for k in t.headline if k in record)
    done(f"evaluate {task} {'bench ' if bench else ''}{spec.name}: {shown} in "
         f"{record['eval_seconds']:.1f} s")
