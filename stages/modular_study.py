"""modular-study: every cell of one modular study (models x swept values x seeds).

Each cell is memoized by content in runs/modular/cells/<fingerprint>
(the configuration, the seed and the training code): a study re-run after one value changed
trains only that value, a cell shared by two studies (sanity and data at the same r_train)
trains once, and a killed cell resumes from its checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.stages.common import Memo, done, friendly_errors, params_option, paths

# The code a cell's result depends on (in the arithrepro package): a change to any of it retrains.
CODE = ("train.py", "models", "tasks/modular.py")
# dvclive's per-step training loss of a cell, in its memo cell (arithrepro/live.py)
STEPS = "live/plots/metrics/train/loss.tsv"
# What a memo cell must hold to be reused: record.json's keys the stages read, and the tables'
# columns.
MEMO = (("task", "model", "seed", "val_acc", "val_loss"),
        {"curves.csv": ("step", "train_loss", "val_loss", "train_acc", "val_acc"),
         STEPS: ("step", "loss")})


@click.command("modular-study")
@params_option
@click.option("--study", required=True, help="sanity, data, orders, size, compute or regularization.")
@friendly_errors
def modular_study(params_path: str, study: str) -> None:
    """Train and score every cell of a modular study.

    Reads params: device, precision, compile, modular.{models,seeds,base,studies.<study>}.
    Writes, per cell
    `<model>-<study>[.<swept values>]-<seed>`: metrics/modular/runs/<study>/<cell>.json (the run's
    metrics), plots/modular/curves/<study>/<cell>.csv (loss, accuracy, per-order accuracy and
    parameter norm on the full train and validation sets, every eval_every steps),
    plots/modular/steps/<study>/<cell>.tsv (per-step batch loss, dvclive's series) and
    runs/modular/<study>/<cell>.pt (the final model). While a cell trains, its series (loss,
    learning rate, every evaluation) grow in runs/modular/cells/<fingerprint>/live/.

    curves.csv stays a table of its own: the evaluations' columns side by side, which the
    figures, the budgets' metrics and `dvc plots` (train and validation accuracy overlaid) read;
    dvclive writes a file per series.
    """
    import pandas as pd

    from arithrepro import config
    from arithrepro.tasks.modular import STUDIES, curve_metrics, study_runs

    params = config.load(params_path)
    if study not in STUDIES:
        raise config.ParamsError(f"--study = {study!r}: expected one of {', '.join(STUDIES)}")
    runs = study_runs(params, study)
    device, precision = config.placement(params, "modular")
    memo = Memo("modular", CODE, *MEMO, outs={
        "record": paths.record("modular") / study,
        "curves.csv": paths.plots / "modular" / "curves" / study,
        STEPS: paths.plots / "modular" / "steps" / study,
        "model.pt": paths.run("modular", study)})
    memo.clear_outputs()
    trained, records = 0, {}
    for i, run in enumerate(runs):
        cell = memo.cell(*_content(run, precision, params["compile"]))
        if not memo.finished(cell):
            click.echo(f"[{i + 1}/{len(runs)}] {run.name}", err=True)
            _train(run, cell, device, precision, params["compile"])
            trained += 1
        # a cell shared with another study is named after this one, and scored over this
        # study's budgets
        changes = {"size": run.label}
        if run.budgets:
            curve = pd.read_csv(cell / "curves.csv").to_dict("records")
            for alpha in run.budgets:
                changes.update(curve_metrics(curve, upto=int(alpha * run.config["steps"]),
                                             prefix=f"a{alpha:g}_"))
        records[run.name] = memo.publish(cell, run.name, **changes)
    best = max(records, key=lambda name: records[name]["val_acc"])
    done(f"modular-study {study}: {len(runs)} cells ({trained} trained, {len(runs) - trained} "
         f"reused) on {device}; best val accuracy {100 * records[best]['val_acc']:.2f} % ({best}) -> "
         f"{memo.outs['record']}")


def _content(run, precision: str, compile_: bool) -> tuple:
    """What a cell's result depends on besides the code: how often to checkpoint does not
    change it (resuming is exact)."""
    config = {k: v for k, v in run.config.items() if k != "checkpoint_every"}
    return run.model, run.seed, config, precision, compile_


def _train(run, cell: Path, device: str, precision: str, compile_: bool) -> None:
    import pandas as pd

    from arithrepro.io import save_torch, write_frame, write_json
    from arithrepro.live import Series
    from arithrepro.provenance import provenance
    from arithrepro.tasks.modular import Vocab, curve_metrics, embedding_params
    from arithrepro.tasks.modular import cell as study_cell
    from arithrepro.train import fit

    c = run.config
    net, size, dims, data, cfg, batches = study_cell(run, device, precision, compile_)
    read = {"model": run.model, "seed": run.seed, "config": run.config}
    origin = provenance(read, device=device, precision=precision, compiled=compile_)
    result = fit(net, batches, data.evaluate, cfg, cell / "checkpoint.pt", cell.name,
                 series=Series(cell / "live", read))
    curve = result["val_curve"]
    record = {"task": "modular", "model": run.model, "size": run.label, "seed": run.seed,
              "params": sum(p.numel() for p in net.parameters()) - embedding_params(net),
              **{k: v for k, v in c.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
              **curve_metrics(curve)}
    for order in data.orders if len(data.orders) > 1 else []:
        sub = [{"step": r["step"], **{k: r[f"o{order}_{k}"] for k in
                                      ("train_loss", "val_loss", "train_acc", "val_acc")}}
               for r in curve]
        record.update({k: v for k, v in curve_metrics(sub, prefix=f"o{order}_").items()
                       if not k.startswith(f"o{order}_dt_")})
    record.update(param_norm=curve[-1]["param_norm"], train_seconds=result["train_seconds"],
                  s_per_step=result["train_seconds"] / max(result["steps"], 1),
                  provenance={"train": origin})
    write_frame(cell / "curves.csv", pd.DataFrame(curve).drop(columns="epoch"))
    save_torch(cell / "model.pt", {"model": run.model, "size": size, "dropout": float(c["dropout"]),
                                   "dims": dims, "vocab": Vocab(c["p"], c["operator"]).tokens(),
                                   "state_dict": {k: v.cpu() for k, v in net.state_dict().items()}})
    (cell / "checkpoint.pt").unlink(missing_ok=True)
    write_json(cell / "record.json", record)  # last: its presence marks the cell finished
