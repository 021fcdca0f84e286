"""evaluate: greedy decoding of one trained cell on the test and OOD sets."""

from __future__ import annotations

import click

from arithrepro.stages.common import (cell_options, default_device, done, friendly_errors,
                                     params_option, paths)


@click.command("evaluate")
@params_option
@cell_options
@friendly_errors
def evaluate(params_path: str, task: str, model: str, size: str, seed: int) -> None:
    """Decode the test and OOD sets greedily (cached) and score exact match.

    Reads params: profile, profiles.<profile>.<task>.eval, <task>.data.max_out;
    runs/<task>/<cell>/{model.pt,train.json}; data/<task>/{test,ood}.parquet.
    Writes metrics/<task>/runs/<cell>.json (the run's record: params, test_acc, ood_acc,
    best_val_loss, train_seconds, ...) and plots/<task>/by_length/<cell>.csv.
    """
    import time

    import pandas as pd
    import torch
    from tqdm import tqdm

    from arithrepro import config
    from arithrepro.evaluate import accuracy_by, decode_split
    from arithrepro.io import read_json, write_frame, write_json
    from arithrepro.models import build_model
    from arithrepro.tasks import TASKS

    params = config.load(params_path)
    c = config.cell(params, task, model, size, seed)
    t = TASKS[task]
    run_dir = paths.run(task, c.name)
    ckpt = run_dir / "model.pt"
    if not ckpt.is_file():
        raise FileNotFoundError(f"{ckpt}: missing; run `arithrepro train` for this cell first")
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    net = build_model(saved["model"], saved["size"], vocab_size=saved["vocab_size"],
                      dropout=saved["dropout"], max_len=saved["max_len"], pad_id=saved["pad_id"])
    net.load_state_dict(saved["state_dict"])
    net.to(default_device()).eval()
    batch = config.profile_block(params, task)["eval"]["batch_size"]
    max_new = t.max_new_tokens(params)
    splits = {name: t.load(paths.data(task), name) for name in ("test", "ood")}
    record = dict(read_json(run_dir / "train.json"))
    rows = []
    t0 = time.perf_counter()
    with tqdm(total=sum(map(len, splits.values())), desc=f"evaluate {c.name}", unit="problem",
              dynamic_ncols=True) as bar:
        for name, split in splits.items():
            generated = decode_split(net, t, split, max_new, batch, progress=bar.update)
            correct = t.score(split, generated)
            record[f"{name}_acc"] = float(correct.float().mean())
            rows += [{"split": name, **r} for r in accuracy_by(correct, split.lengths)]
    record["eval_seconds"] = time.perf_counter() - t0
    write_frame(paths.by_length(task, c.name), pd.DataFrame(rows))
    write_json(paths.record(task, c.name), record)
    done(f"evaluate {task} {c.name}: test {100 * record['test_acc']:.2f} %, "
         f"OOD {100 * record['ood_acc']:.2f} % in {record['eval_seconds']:.1f} s")
