"""evaluate: one trained run on its task's evaluation sets."""

from __future__ import annotations

import click

from arithrepro.runs import data_dir
from arithrepro.stages.common import (TaskName, data_params, done, friendly_errors,
                                     params_option)


@click.command("evaluate")
@params_option
@click.option("--task", required=True, type=TaskName(grid=True), help="A grid task.")
@click.option("--bench", is_flag=True, help="RUN is a benchmark run (arithrepro/bench.py).")
@click.argument("name", metavar="RUN")
@friendly_errors
def evaluate(params_path: str, task: str, bench: bool, name: str) -> None:
    """Score the trained RUN (<model>-<size>-<seed>, as `arithrepro train` names it): expr
    decodes the test and OOD sets (greedy, cached); abacus decodes the digits x digits grid at
    each inference recurrence count; looped classifies every position at each evaluation
    length.

    Reads params: device, cpu, <task>.{eval,data};
    runs/<task>/<run>/{model.pt,train.json}; data/<task>/.
    Writes metrics/<task>/runs/<run>.json (the run's record: params, accuracies,
    best_val_loss, train_seconds, ...) and plots/<task>/eval/<run>.csv; a benchmark run,
    the same under runs/<task>/bench/, metrics/<task>/bench/ and plots/<task>/bench/.
    """
    import time

    import pandas as pd
    from tqdm import tqdm

    from arithrepro import config, cpu
    from arithrepro.io import read_json, write_frame
    from arithrepro.models.registry import load_model
    from arithrepro.provenance import provenance
    from arithrepro.records import write_record
    from arithrepro.tasks.registry import REPORTS, TASKS

    from arithrepro import bench as benchmark
    from arithrepro import lookup
    from arithrepro.params_reads import unrecorded

    params = config.load(params_path)
    cpu.apply(params["cpu"])
    config.grid_task(task)
    t = TASKS[task]
    among = benchmark.configs(t, unrecorded(params)) if bench else None
    run = lookup.find(t, unrecorded(params), name, among)
    files = run.files
    net, _ = load_model(_trained(files.model))
    device = config.device_of(params)
    net.to(device).eval()
    trained = read_json(_trained(files.summary), ("task", "model", "size", "seed"))
    origin = trained.get("provenance", {})  # the training's, beside this run's
    # scoring runs without autocast, in fp32 whatever the training's precision
    origin["evaluate"] = provenance({"eval": params[task]["eval"],
                                     "data": data_params(params, task)},
                                    device=device, precision="fp32")
    t0 = time.perf_counter()
    with tqdm(total=t.eval_count(params, net), desc=f"evaluate {task} {run.name}", unit="problem",
              dynamic_ncols=True) as bar:
        metrics, rows = t.evaluate(net, params, data_dir(task), device, progress=bar.update)
    fields = {k: v for k, v in trained.items() if k not in run.head() and k != "provenance"}
    fields.update(metrics)
    fields["eval_seconds"] = time.perf_counter() - t0
    write_frame(files.evaluation, pd.DataFrame(rows))
    record = write_record(files.record, run, fields, origin)
    shown = ", ".join(f"{k} {100 * record[k]:.2f} %" for k in REPORTS[task].headline
                      if k in record)
    done(f"evaluate {task} {'bench ' if bench else ''}{run.name}: {shown} in "
         f"{record['eval_seconds']:.1f} s")


def _trained(path):
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; run `arithrepro train` for this run first")
    return path
