"""evaluate: one trained cell on its task's evaluation sets."""

from __future__ import annotations

import click

from arithrepro.stages.common import (cell_options, data_params, done, friendly_errors,
                                     params_option, paths)


@click.command("evaluate")
@params_option
@cell_options
@friendly_errors
def evaluate(params_path: str, task: str, model: str, size: str, seed: int) -> None:
    """Score a trained cell: expr decodes the test and OOD sets (greedy, cached); abacus
    decodes the digits x digits grid at each inference recurrence count; looped classifies
    every position at each evaluation length.

    Reads params: device, cpu, <task>.{eval,data};
    runs/<task>/<cell>/{model.pt,train.json}; data/<task>/.
    Writes metrics/<task>/runs/<cell>.json (the run's record: params, accuracies,
    best_val_loss, train_seconds, ...) and plots/<task>/eval/<cell>.csv.
    """
    import time

    import pandas as pd
    from tqdm import tqdm

    from arithrepro import config, cpu
    from arithrepro.io import read_json, write_frame, write_json
    from arithrepro.models.registry import load_model
    from arithrepro.provenance import provenance
    from arithrepro.tasks.registry import TASKS

    params = config.load(params_path)
    cpu.apply(params["cpu"])
    c = config.cell(params, task, model, size, seed)
    t = TASKS[task]
    run_dir = paths.run(task, c.name)
    ckpt = run_dir / "model.pt"
    if not ckpt.is_file():
        raise FileNotFoundError(f"{ckpt}: missing; run `arithrepro train` for this cell first")
    net, _ = load_model(ckpt)
    device = config.device_of(params)
    net.to(device).eval()
    summary = run_dir / "train.json"
    if not summary.is_file():
        raise FileNotFoundError(f"{summary}: missing; run `arithrepro train` for this cell first")
    record = dict(read_json(summary, ("task", "model", "size", "seed")))
    origin = record.pop("provenance", {})  # the training's, put back last beside this run's
    # scoring runs without autocast, in fp32 whatever the training's precision
    origin["evaluate"] = provenance({"eval": params[task]["eval"],
                                     "data": data_params(params, task)},
                                    device=device, precision="fp32")
    t0 = time.perf_counter()
    with tqdm(total=t.eval_count(params, net), desc=f"evaluate {task} {c.name}", unit="problem",
              dynamic_ncols=True) as bar:
        metrics, rows = t.evaluate(net, params, paths.data(task), device, progress=bar.update)
    record.update(metrics)
    record["eval_seconds"] = time.perf_counter() - t0
    record["provenance"] = origin
    write_frame(paths.evaluation(task, c.name), pd.DataFrame(rows))
    write_json(paths.record(task, c.name), record)
    shown = ", ".join(f"{k} {100 * record[k]:.2f} %" for k in t.headline if k in record)
    done(f"evaluate {task} {c.name}: {shown} in {record['eval_seconds']:.1f} s")
