"""modular's part of dvc.yaml: a training stage per study, then the attention maps."""

from __future__ import annotations

from arithrepro.runs import records_dir, runs_dir
from arithrepro.tasks.modular_params import STUDIES, SWEEPS, label

def stages() -> list:
    """A training stage per study: its models x the values it sweeps x its seeds, each run
    scored on the full train and validation sets as it trains; then the attention maps of
    the best run of modular.attention.study."""
    from arithrepro.dvcfile import Stage, item, placeholders, ref, train_stage

    out = []
    for study in STUDIES:
        s, keys = f"modular.studies.{study}", SWEEPS[study]
        run = placeholders("modular", label(study, {k: item(k) for k in keys}), group=study)
        matrix = {"model": ref(f"{s}.models"), **{k: ref(f"{s}.sweep.{k}") for k in keys},
                  "seed": ref(f"{s}.seeds")}
        params = ["modular.base", f"{s}.set"] + ([f"{s}.budgets"] if study == "compute" else [])
        out.append(train_stage(f"train-modular-{study}", run, matrix, params, deps=[],
                               outs=(str(run.record), str(run.curve)),
                               family="train-modular"))
    study = ref("modular.attention.study")
    out.append(Stage("modular-attention", "modular-attention", "modular",
                     params=["modular.base", f"modular.studies.{study}.set", "modular.attention"],
                     outs=["plots/modular/attention"],
                     deps=[str(records_dir("modular") / study), str(runs_dir("modular", study))],
                     note="the attention maps of the best run of modular.attention.study"))
    return out
