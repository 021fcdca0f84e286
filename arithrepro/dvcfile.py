"""The pieces dvc.yaml is made of: a stage as a task declares it, and the shape every training run
shares. arithrepro/pipeline.py puts the tasks' stages together and writes dvc.yaml; nothing here
runs in a stage (code-deps leaves this file out: a change to a declaration changes dvc.yaml,
which DVC compares itself).

A training stage is declared through a run's `Files` (arithrepro/runs.py) named with DVC's
`${item.<axis>}` placeholders, so a run's folder and record are named by the same properties
the code uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from arithrepro.runs import Files, run_name


@dataclass
class Stage:
    name: str                   # as dvc.yaml names it: generate-expr, train-modular-data
    command: str                # the `arithrepro` subcommand it runs (its code: code-deps)
    task: str | None            # whose code it runs; None: every task's (the summary)
    args: str = ""              # the command's arguments
    matrix: dict | None = None  # {axis: "${params key}"}
    params: list = field(default_factory=list)
    outs: list = field(default_factory=list)
    deps: list = field(default_factory=list)
    plots: list = field(default_factory=list)
    metrics: list = field(default_factory=list)
    family: str = ""            # its code-deps file, when several stages share one
    models: tuple = ()          # the registry models it builds, where not its task's own
    note: str = ""              # a comment above it in dvc.yaml

    def __post_init__(self):
        self.family = self.family or self.name

    def as_dict(self) -> dict:
        out = {"matrix": self.matrix} if self.matrix else {}
        out["cmd"] = f"arithrepro {self.command}" + (f" {self.args}" if self.args else "")
        for key in ("params", "outs", "metrics", "plots"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        # code-deps itself reads the sources; every other stage, its family's list of them
        out["deps"] = (["arithrepro", "stages"] if self.command == "code-deps"
                       else [*self.deps, f"code-deps/{self.family}.txt"])
        return out


def ref(key: str) -> str:
    """DVC's interpolation of a params key."""
    return "${" + key + "}"


def item(axis: str) -> str:
    """A matrix cell's value on `axis`."""
    return ref(f"item.{axis}")


# dvclive's series of a run (arithrepro/live.py writes them as it trains)
LIVE_PLOTS = (("train/loss.tsv", {"x": "step", "template": "conf/plot_templates/smooth_loss.json"}),
              ("train/lr.tsv", {"x": "step", "y_label": "learning rate",
                                "template": "conf/plot_templates/rate.json"}),
              ("val", {"x": "step"}))


def train_stage(name: str, run: Files, matrix: dict, params: list, deps: list,
                outs: tuple = (), family: str = "", models: tuple = ()) -> Stage:
    """The stage of a family of training runs: `run` names one run's files through the
    matrix's placeholders; every run writes model.pt, train.json and dvclive's folder, then
    `outs` (a task scored as it trains: its record, its curve)."""
    bench = " --bench" if run.home else ""
    return Stage(
        name, "train", run.task, args=f"--task {run.task}{bench} {run.name}", matrix=matrix,
        params=["device", "precision", "compile", "graphs", "cpu", *params],
        outs=[str(run.model), str(run.summary), f"{run.live}/metrics.json",
              f"{run.live}/params.yaml", *outs],
        plots=[{f"{run.live}/plots/metrics/{series}": dict(definition)}
               for series, definition in LIVE_PLOTS],
        deps=list(deps), family=family, models=models)


def placeholders(task: str, label: str, group: str = "", home: str = "",
                 model: str | None = None) -> Files:
    """The files of a matrix's runs: the seed is an axis, and the model too unless named;
    `label` is the task's own."""
    return Files(task, run_name(model or item("model"), label, item("seed")), group, home)
