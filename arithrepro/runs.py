"""One training run of any task, from params to record, the same way for all of them.

A task lists the runs its params ask for (`Task.runs(params)`: a `Run` each, in dvc.yaml's
order; a run is one cell of a DVC matrix stage named by `Run.name`). `build` (below) makes one
ready to train on a device from what the task says of it (its data, architecture and loop);
arithrepro/runner.py trains it and writes its records. Where a run's files live is said once,
by `Files`; nothing else spells a run's paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# The folders of the pipeline, relative to the repository root where DVC runs stages
DATA, RUNS, METRICS, PLOTS = Path("data"), Path("runs"), Path("metrics"), Path("plots")


def data_dir(task: str) -> Path:
    return DATA / task


def runs_dir(task: str, within: str = "") -> Path:
    """The folder of a task's runs (`within`: of a benchmark's, or of one study's)."""
    return RUNS / task / within


def records_dir(task: str, home: str = "") -> Path:
    """The records of a task's runs (a benchmark's under `home`)."""
    return METRICS / task / (home or "runs")


def evaluations_dir(task: str, home: str = "") -> Path:
    """A grid task's per-length (or per-digits) scores of its runs, the evaluate stage's."""
    return PLOTS / task / (home or "eval")


def run_name(model: str, label: str, seed) -> str:
    return f"{model}-{label}-{seed}"


@dataclass(frozen=True)
class Files:
    """Where one run's files live. Its fields are text, so a DVC matrix's placeholders
    (`${item.seed}`) fill it as well as a run's values do (arithrepro/dvcfile.py)."""
    task: str
    name: str
    group: str = ""   # a folder between the task and the run (modular: the study)
    home: str = ""    # "bench": a benchmark run (arithrepro/bench.py), beside the task's own

    @property
    def dir(self) -> Path:
        return runs_dir(self.task, self.home) / self.group / self.name

    @property
    def model(self) -> Path:
        """The trained weights and the architecture that rebuilds them."""
        return self.dir / "model.pt"

    @property
    def summary(self) -> Path:
        """The training's record: steps, losses, time, provenance."""
        return self.dir / "train.json"

    @property
    def live(self) -> Path:
        """dvclive's series of the run as it trains (arithrepro/live.py)."""
        return self.dir / "live"

    @property
    def checkpoint(self) -> Path:
        """What a run cut short resumes from; lives only while it trains."""
        return self.dir / "checkpoint.pt"

    @property
    def record(self) -> Path:
        """What the reports read of the run: its scores (the evaluate stage's, for a grid task;
        the training's, for a task scored as it trains)."""
        return records_dir(self.task, self.home) / self.group / f"{self.name}.json"

    @property
    def evaluation(self) -> Path:
        """A grid run's per-length (or per-digits) scores, the evaluate stage's plot data."""
        return evaluations_dir(self.task, self.home) / f"{self.name}.csv"

    @property
    def curve(self) -> Path:
        """A run scored as it trains: its scores at every evaluation (`dvc plots` data)."""
        return PLOTS / self.task / "curves" / self.group / f"{self.name}.csv"


@dataclass(frozen=True)
class Run:
    task: str
    model: str        # the name the run is filed under (a key of <task>.models or a registry model)
    label: str        # what distinguishes it besides model and seed: a size, a study's swept
                      # values, a schedule (the records' `size` column)
    seed: int
    group: str = ""   # a folder between the task and the run (modular: the study)
    swept: dict = field(default_factory=dict, compare=False)  # a study's swept values (modular)
    home: str = ""    # "bench": a benchmark run (arithrepro/bench.py)

    @property
    def name(self) -> str:
        return run_name(self.model, self.label, self.seed)

    @property
    def files(self) -> Files:
        return Files(self.task, self.name, self.group, self.home)

    def head(self) -> dict:
        """The fields every record of the run starts with."""
        return {"task": self.task, "model": self.model, "size": self.label, "seed": self.seed}


@dataclass(frozen=True)
class Placement:
    """Where and how a run trains: the machine's side, not the run's."""
    device: str
    precision: str
    compile: bool
    graphs: bool = False  # each training step a CUDA graph (on a GPU only)


@dataclass
class Data:
    """What a task gives a run to train on (`Task.data`): the batches, the validation set (a
    (make_batch, n) pair the loop scores, or the task's own evaluation called with the model),
    what the task's architecture and loop need of the data (`facts`: the corpus's vocabulary,
    the first scored position), the files it was read from (their bytes are part of the
    resume fingerprint) and what else the run's record notes of it (`notes`)."""
    batches: object
    valid: object
    facts: dict = field(default_factory=dict)
    files: list = field(default_factory=list)
    notes: dict = field(default_factory=dict)


@dataclass
class Built:
    """A run ready to train: the model, the architecture model.pt stores with its weights, the
    data, the loop's settings, and the params the result depends on (provenance, dvclive's
    params, the resume fingerprint)."""
    net: object
    arch: dict
    data: Data
    cfg: object
    read: dict


def configure(task, run: Run, params: dict, where: Placement, data: Data | None = None):
    """(architecture, TrainConfig) of `run`: the one place a run's loop settings are made, for
    every task. `data`: the run's (a grid task's settings need none)."""
    from arithrepro.train.config import TrainConfig

    cfg = TrainConfig(**task.loop(run, params, data), seed=run.seed, precision=where.precision,
                      compile=where.compile, graphs=where.graphs)
    return task.architecture(run, params, data), cfg


def build(task, run: Run, params: dict, where: Placement, trial: bool = False) -> Built:
    """`run` of `task` ready to train on `where`, the same way for every task. trial: on data
    made in memory, without the files earlier stages write (`arithrepro estimate` times runs
    before they exist)."""
    import torch

    from arithrepro.models.registry import build_model

    data = task.data(run, params, where.device, trial)
    arch, cfg = configure(task, run, params, where, data)
    torch.manual_seed(run.seed)   # the model's initialization, after the data's draws
    net = build_model(arch["model"], arch["size"], dropout=arch["dropout"], form=arch.get("form"),
                      **arch["dims"])
    return Built(net.to(where.device), arch, data, cfg, task.reads(run, params, arch, cfg))


def find(task, params: dict, name: str, among: list[Run] | None = None) -> Run:
    """The run of `task` called `name` among `among` (the benchmark's runs of it), else among
    the task's own runs in these params (ParamsError naming the ones there are: the name is
    the caller's input, refused as the params are)."""
    runs = {r.name: r for r in (task.runs(params) if among is None else among)}
    if name not in runs:
        shown = ", ".join(list(runs)[:12]) + (", ..." if len(runs) > 12 else "") or "none"
        what = "a run" if among is None else "a benchmark run"
        from arithrepro.schema import ParamsError

        raise ParamsError(f"run {name}: not {what} of {task.name} in these params ({shown})")
    return runs[name]
