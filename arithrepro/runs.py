"""One training run of any task, described the same way for all of them.

A task turns the resolved params into its runs (`Task.runs(params)`: a RunSpec each) and builds
one for training (`Task.build(spec, params, placement)`: a Built); arithrepro/runner.py trains
it. Every run is one cell of a DVC matrix stage (dvc.yaml), named by `RunSpec.name`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RunSpec:
    task: str
    model: str             # the name the run is filed under (a key of <task>.models or a registry model)
    label: str             # what distinguishes it besides model and seed: a size, a study's
                           # swept values, a schedule (the records' `size` column)
    seed: int
    group: str = ""        # a folder between the task and the run (modular: the study)
    setting: dict = field(default_factory=dict, compare=False)  # the task's own description
    # "bench": a benchmark cell (arithrepro/bench.py), filed in its task's folders under bench/
    # beside the task's own runs, which the task's reports read
    home: str = ""

    @property
    def name(self) -> str:
        return f"{self.model}-{self.label}-{self.seed}"

    @property
    def dir(self) -> Path:
        return Path("runs") / self.task / self.home / self.group / self.name

    @property
    def record(self) -> Path:
        """What the reports read of the run: its scores (the evaluate stage's, for a grid task)."""
        return Path("metrics") / self.task / (self.home or "runs") / self.group / f"{self.name}.json"

    @property
    def evaluation(self) -> Path:
        """A grid cell's per-length (or per-digits) scores, the evaluate stage's plot data."""
        return Path("plots") / self.task / (self.home or "eval") / f"{self.name}.csv"


@dataclass
class Built:
    """A run ready to train: fit's arguments, the architecture model.pt stores (with the state
    dict), and the params the result depends on (provenance, dvclive's params, the resume
    fingerprint)."""
    net: object
    arch: dict
    batches: object
    valid: object
    cfg: object
    read: dict
    data_files: list = field(default_factory=list)    # the files it trains on (their bytes are
                                                      # part of the resume fingerprint)
    extra: dict = field(default_factory=dict)         # what else the task's record notes


@dataclass(frozen=True)
class Placement:
    device: str
    precision: str
    compile: bool
    graphs: bool = False  # each training step a CUDA graph (on a GPU only)


def find(task, params: dict, name: str, among: list[RunSpec] | None = None) -> RunSpec:
    """The run of `task` called `name` among `among` (the benchmark's runs of it), else among
    the task's own runs in these params (ValueError naming the ones there are)."""
    specs = {s.name: s for s in (task.runs(params) if among is None else among)}
    if name not in specs:
        shown = ", ".join(list(specs)[:12]) + (", ..." if len(specs) > 12 else "") or "none"
        what = "a run" if among is None else "a benchmark run"
        raise ValueError(f"run {name}: not {what} of {task.name} in these params ({shown})")
    return specs[name]
