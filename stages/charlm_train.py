"""charlm-train: every run of charlm.runs in one stage. Each run is memoized by content in
runs/charlm/cells/<fingerprint> (its architecture, schedule, training settings, the corpus and
the training code), so a change to one model's settings retrains that model's runs only.
"""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.stages.common import Memo, done, friendly_errors, params_option, paths

CODE = ("train.py", "models", "tasks/charlm.py")
# dvclive's series of a run, in its memo cell (arithrepro/live.py)
TRAIN_LOSS, VAL_LOSS = "live/plots/metrics/train/loss.tsv", "live/plots/metrics/val/loss.tsv"
# What a memo cell must hold to be reused: record.json's keys the stages read, and the series'
# columns.
MEMO = (("task", "model", "seed", "best_val_loss"),
        {TRAIN_LOSS: ("step", "loss"), VAL_LOSS: ("step", "loss")})


@click.command("charlm-train")
@params_option
@friendly_errors
def charlm_train(params_path: str) -> None:
    """Train every charlm run (models x seq_lengths x seeds).

    Reads params: device, precision, compile, charlm.{models,runs,seeds,train,corpus};
    data/charlm/.
    Writes per run `<model>-s<seq_length>-<seed>`:
    metrics/charlm/runs/<run>.json (final and best validation loss, bits per character,
    parameters, train_seconds, tokens/s), plots/charlm/curves/<run>.tsv (training loss per
    step), plots/charlm/val/<run>.tsv (validation loss every eval_every steps), both dvclive's
    series, and runs/charlm/models/<run>.pt (the final model). While a run trains, its series
    (loss, learning rate, validation) grow in runs/charlm/cells/<fingerprint>/live/.
    """
    from arithrepro import config
    from arithrepro.tasks.charlm import read_corpus, runs

    params = config.load(params_path)
    m = params["charlm"]
    text, vocab, meta = read_corpus(paths.data("charlm"))
    device, precision = config.placement(params, "charlm")
    memo = Memo("charlm", CODE, *MEMO, outs={
        "record": paths.record("charlm"), TRAIN_LOSS: paths.plots / "charlm" / "curves",
        VAL_LOSS: paths.plots / "charlm" / "val", "model.pt": paths.run("charlm", "models")})
    memo.clear_outputs()
    todo = runs(params)
    trained, best = 0, None
    for i, run in enumerate(todo):
        cell = memo.cell(run.model, run.size, run.seq_length, run.steps, run.seed, m["train"],
                         m["corpus"]["val_frac"], m["corpus"]["seed"], meta["sha256"], precision,
                         params["compile"])
        if not memo.finished(cell):
            click.echo(f"[{i + 1}/{len(todo)}] {run.name}", err=True)
            _train(run, m, text, vocab, cell, device, precision, params["compile"])
            trained += 1
        # a cell shared by two model names of the same architecture is named after this one
        record = memo.publish(cell, run.name, model=run.model_name, size=run.label)
        if best is None or record["best_val_loss"] < best[1]:
            best = (run.name, record["best_val_loss"])
    done(f"charlm-train: {len(todo)} runs ({trained} trained, {len(todo) - trained} reused) on "
         f"{device}; lowest validation loss {best[1]:.4f} ({best[0]}) -> {memo.outs['record']}")


def _train(run, m: dict, text: str, vocab, cell: Path, device: str, precision: str,
           compile_: bool) -> None:
    import math

    import pandas as pd

    from arithrepro.tasks.charlm import setup_run
    from arithrepro.io import save_torch, write_json
    from arithrepro.live import Series
    from arithrepro.models.lm import count_params
    from arithrepro.provenance import provenance
    from arithrepro.train import fit

    t = m["train"]
    net, dims, data, cfg, batches, valid = setup_run(run, m, vocab.encode(text), vocab.size, device,
                                                 precision, compile_)
    # model_name is left out: a cell is shared by the names of one architecture
    read = {"model": run.model, "size": run.size, "seq_length": run.seq_length, "steps": run.steps,
            "seed": run.seed, "train": t, "corpus": m["corpus"]}
    origin = provenance(read, device=device, precision=precision, compiled=compile_)
    result = fit(net, batches, valid, cfg, cell / "checkpoint.pt", cell.name,
                 series=Series(cell / "live", read))
    val = pd.DataFrame(result["val_curve"]).drop(columns="epoch")
    final = float(val["val_loss"].iloc[-1])
    record = {"task": "charlm", "model": run.model_name, "size": run.label, "seed": run.seed,
              "params": count_params(net), "seq_length": run.seq_length, "steps": result["steps"],
              "final_val_loss": final, "best_val_loss": result["best_val_loss"],
              "best_step": result["best_step"], "final_bpc": final / math.log(2),
              "best_bpc": result["best_val_loss"] / math.log(2),
              "train_seconds": result["train_seconds"], "tokens_per_s": result["tokens_per_s"],
              "vocab_size": vocab.size, "train_chunks": len(data.train),
              "val_chunks": len(data.val), "provenance": {"train": origin}}
    save_torch(cell / "model.pt", {"model": run.model, "size": run.size,
                                   "dropout": float(t["dropout"]), "dims": dims,
                                   "vocab": vocab.chars,
                                   "state_dict": {k: v.cpu() for k, v in net.state_dict().items()}})
    (cell / "checkpoint.pt").unlink(missing_ok=True)
    write_json(cell / "record.json", record)  # last: its presence marks the run finished
