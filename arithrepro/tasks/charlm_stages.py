"""charlm's part of dvc.yaml: the corpus, the training cells, the samples and attention maps,
the compute table."""

from __future__ import annotations

from arithrepro.runs import data_dir, runs_dir

def stages() -> list:
    """The corpus; a run per model x schedule x seed; samples and attention maps of every
    run; the compute table (each architecture's cost, timed)."""
    from arithrepro.dvcfile import Stage, item, placeholders, ref, train_stage

    run = placeholders("charlm", item("schedule"))
    models = "charlm.models", "charlm.schedules", "charlm.seeds"
    return [
        Stage("charlm-corpus", "charlm-corpus", "charlm", params=["charlm.corpus"],
              outs=["data/charlm"]),
        train_stage("train-charlm", run,
                    {"model": ref("charlm.models"), "schedule": ref("charlm.schedules"),
                     "seed": ref("charlm.seeds")},
                    [f"charlm.architectures.{item('model')}",
                     f"charlm.schedule.{item('schedule')}", "charlm.train", "charlm.corpus"],
                    deps=["data/charlm"], outs=(str(run.record),)),
        Stage("charlm-sample", "charlm-sample", "charlm",
              # the runs' configurations read their training block and corpus too
              params=[*models, "charlm.architectures", "charlm.schedule", "charlm.train",
                      "charlm.corpus", "charlm.sample", "charlm.attention"],
              outs=["metrics/charlm/samples.md", "plots/charlm/attention"],
              deps=[str(data_dir("charlm")), str(runs_dir("charlm"))]),
        Stage("charlm-compute", "charlm-compute", "charlm",
              params=["device", "precision", "compile", "graphs", "charlm.architectures",
                      "charlm.schedules", "charlm.schedule", "charlm.train", "charlm.corpus",
                      "charlm.seeds", "charlm.compute"],
              outs=["metrics/charlm/compute.csv", "metrics/charlm/steps.csv",
                    "metrics/charlm/compute.md"],
              deps=["data/charlm"]),
    ]
