"""One training run of any task, from params to record, the same way for all of them.

A task says what its params ask for as a list of configurations (`Task.configs(params)`: a
`Config` each, in dvc.yaml's order): one model at one size with every setting its training
reads, trained over its seeds. A run is a configuration at one seed (`Run`), one cell of a DVC
matrix stage named by `Run.name`. `build` (below) makes a run ready to train on a device from its
configuration and the task's data for it; arithrepro/runner.py trains it and writes its records.
Where a run's files live is said once, by `Files`; nothing else spells a run's paths.
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


# a record's columns that name its configuration (Config.name is "<model>-<label>", the
# label the records' `size`): the reports group runs by them
CONFIG_KEY = ["model", "size"]


# What the copies of one ensemble may differ in among their training settings (TrainConfig's
# fields): nothing that changes a step's shapes or its program. The optimizer takes each copy's
# rate and decay (arithrepro/optim.py).
PER_COPY = ("seed", "lr", "weight_decay")


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


class Frozen(dict):
    """A mapping that cannot change (a Config's values): nested mappings frozen too, lists
    kept as tuples. `thaw` gives plain dicts and lists back (what model.pt and records hold)."""

    def __init__(self, values=()):
        super().__init__((k, freeze(v)) for k, v in dict(values).items())

    def _refuse(self, *args, **kwargs):
        raise TypeError("a configuration's values do not change; build another Config")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse

    def __hash__(self):
        import json

        return hash(json.dumps(thaw(self), sort_keys=True, default=str))

    def __reduce__(self):
        return Frozen, (thaw(self),)


def freeze(value):
    if isinstance(value, dict) and not isinstance(value, Frozen):
        return Frozen(value)
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value):
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class Config:
    """One model at one size with every setting its training reads, trained over `seeds`: what a
    task's params ask for (`Task.configs`), the unit the scheduler, the cluster executor and the
    projection key on (`name`); a record carries its model and label, which make its name.

    architecture: what model.pt stores beside the weights and the model builder's arguments
      ({model: the registry's, size, dropout, dims, and form where the model meets the task
      through an adapter, or the vocabulary the task decodes with}), but what its data decides
      (`Data.architecture`: charlm's vocabulary);
    loop: train/config.py's TrainConfig fields but the seed, the placement's and what its data
      decides (`Data.loop`: modular's first scored position);
    settings: the params blocks its result depends on as the params name them (its model's, its
      data's, its budget's): provenance hashes them, dvclive's params.yaml shows them and a
      checkpoint resumes only under them.
    Printing a task's configs shows its grid; what changes a step's shapes is the architecture
    and the loop's batch size (projection._shape_key)."""
    task: str
    model: str        # the name its runs are filed under (a key of <task>.models or a registry model)
    label: str        # what distinguishes it besides the model: a size, a study's swept values,
                      # a schedule (the records' `size` column)
    seeds: tuple = ()
    architecture: Frozen = field(default_factory=Frozen, hash=False, repr=False)
    loop: Frozen = field(default_factory=Frozen, hash=False, repr=False)
    settings: Frozen = field(default_factory=Frozen, hash=False, repr=False)
    group: str = ""   # a folder between the task and the run (modular: the study)
    home: str = ""    # "bench": a benchmark configuration (arithrepro/bench.py)
    key: tuple = field(default=(), compare=False, repr=False)  # what Task.config builds it from
    # its train stage in dvc.yaml, and its values on that stage's matrix axes but the seed, in
    # the matrix's order: a run's cell is `<stage>@<values>-<seed>` (Run.cell)
    stage: str = field(default="", compare=False)
    item: tuple = field(default=(), compare=False, repr=False)
    # its settings that change no step's shape (modular's r_train, rate and weight decay):
    # configurations that differ in these alone, the loop's per-copy values and their seeds
    # train as one ensemble (`ensemble_key`)
    free: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        for name in ("architecture", "loop", "settings"):
            object.__setattr__(self, name, freeze(dict(getattr(self, name))))
        object.__setattr__(self, "seeds", tuple(self.seeds))

    @property
    def name(self) -> str:
        return f"{self.model}-{self.label}"

    @property
    def runs(self) -> list["Run"]:
        return [Run(self, seed) for seed in self.seeds]

    @property
    def ensemble_key(self) -> str:
        """What configurations that train as one ensemble share: all but their `free` settings
        and the loop's per-copy values (PER_COPY). The scheduler groups pending runs by it;
        stacking.ensembles has the last word, on the runs built."""
        import json

        return json.dumps([self.task, self.home, thaw(self.architecture),
                           {k: v for k, v in thaw(self.loop).items() if k not in PER_COPY},
                           {k: v for k, v in thaw(self.settings).items() if k not in self.free}],
                          sort_keys=True, default=str)


@dataclass(frozen=True)
class Run:
    """A configuration at one seed: one cell of a train stage."""
    config: Config
    seed: int

    task = property(lambda self: self.config.task)
    model = property(lambda self: self.config.model)
    label = property(lambda self: self.config.label)
    group = property(lambda self: self.config.group)
    home = property(lambda self: self.config.home)

    @property
    def name(self) -> str:
        return run_name(self.model, self.label, self.seed)

    @property
    def cell(self) -> str:
        """Its cell of its configuration's train stage, as DVC names it (train-expr@gpt-small-0,
        train-modular-data@lstm-std-0.3-0, train-bench-looped-gpt@0)."""
        return f"{self.config.stage}@" + "-".join(map(str, (*self.config.item, self.seed)))

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
    what the data decides of the architecture and the loop (`architecture`: charlm's
    vocabulary and its size, merged into the configuration's, `dims` field by field; `loop`:
    modular's first scored position), the files it was read from (their bytes are part of the
    resume fingerprint) and what else the run's record notes of it (`notes`)."""
    batches: object
    valid: object
    architecture: dict = field(default_factory=dict)
    loop: dict = field(default_factory=dict)
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
