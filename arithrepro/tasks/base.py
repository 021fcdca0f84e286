"""The task interface. A task owns its params blocks, its data and its scoring; the pipeline
around it (stages/, train/, decoding.py) is shared.

Every task (`Task`) provides:
    name, forms (the forms of samples it offers its models, models/forms.py: tokens,
    digit-tokens, pairs; a model meets it directly or through an adapter)
    params_schema()                      its params.yaml block (resolved values)
    dims(values) -> dict                 the model builder's task-dependent arguments
and may override check_params(params) (checks across keys) and precision (the source's).

A grid task (`GridTask`: expr, abacus, looped) runs as train/evaluate cells over
<task>.models x <task>.sizes x <task>.seeds, its setting being the whole params, and provides:
    generate(params, out_dir, progress) -> one-line summary    the dataset files
    train_batches(params, data_dir, seed, device)              EpochBatches | StreamBatches
    valid_set(params, data_dir, device) -> (make_batch(idx) -> (x, y, mask), n)
    evaluate(model, params, data_dir, device, progress) -> (metrics, rows)
Optional, for progress bars and `arithrepro estimate`: generate_count, eval_count, valid_count,
sample_batches. A `StreamTask` (abacus, looped) draws fresh samples every step: it provides
train_sampler(params, device) instead of train_batches.

Every task says what its params ask for as configurations, `configs(params)` (arithrepro/
runs.py's Config: a model at a size with its architecture, loop and settings, over its seeds; in
dvc.yaml's order, each seed a cell of a train stage): it lists them (`listed`) and builds one
(`config`), and gives a run its `data`. runner.build makes a run from its configuration and its
data, the same for every task; arithrepro/runner.py trains it. modular and charlm score their
runs as they train: they return their records' fields and curve from `scores`, which the runner
writes; they build the registry models their TAKES names (`own`). A task makes its data of
arithrepro/batches.py's batches and rows and calls nothing of train/.

What a task declares beside its data and scoring, its part of dvc.yaml, what its reports lead
with and which models it takes, is in tasks/declared.py, defined in the task's module beside
`TASK`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from arithrepro.models.forms import meeting, refusal
from arithrepro.models.registry import MODELS
from arithrepro.params_reads import unrecorded
from arithrepro.runs import Built, Config, Data, Run
from arithrepro.runs import data_dir as data_dir_of
from arithrepro.schema import ParamsError, choice, fail, integer, list_of, number


def train_schema(**extra) -> dict:
    """<task>.train: the training loop (optimizer, schedule, the state a run ends with) and its
    budget (`extra`: batch size, epochs or steps, how often to validate and checkpoint)."""
    return {
        "optimizer": choice("lamb", "adam", "adamw"),
        "schedule": choice("linear", "constant"),
        "warmup_frac": number(0, 1, hi_open=True),
        "weight_decay": number(0),
        "keep": choice("best", "last"),   # the state a run ends with: best validation, or last
        **extra,
    }


def _size_name(key, value) -> None:
    if not isinstance(value, str):
        fail(key, value, "a size name")


def form_for(task, model: str) -> str:
    """The form of samples `model` is given on `task` (an adapter's where it takes another);
    TypeError in one line where it cannot take the task's."""
    met = meeting(MODELS[model], task.forms)
    if met is None:
        raise TypeError(refusal(task.name, task.forms, model, MODELS[model]))
    return met[0]


def architecture(params: dict, model: str, size: str) -> dict:
    """A model's architecture fields: its size, plus the fields it borrows from a task's
    budget (its registry line's budget_from: the abacus width), on whichever task it trains."""
    spec = MODELS[model]
    arch = dict(params["models"][model]["sizes"][size])
    if spec.budget_fields:
        task, block = spec.budget_from.split(".")
        arch.update({k: params[task][block][k] for k in spec.budget_fields})
    return arch


class Task(ABC):
    name = ""
    forms: tuple[str, ...] = ("tokens",)   # what it can give a model, the first preferred
    grid = False      # a grid task's runs are train/evaluate cells over models x sizes x seeds
    # the precision the source trained in on a GPU (params precision: auto follows it):
    # fp32, or mixed (bf16 autocast where the GPU has it, else fp16 with a gradient scaler)
    precision = "fp32"

    @classmethod
    @abstractmethod
    def params_schema(cls) -> dict:
        """The schema of params.yaml's <name> block."""

    @classmethod
    def check_params(cls, params: dict) -> None:
        """Checks across keys, after every block passed its schema; ParamsError if one fails."""

    @abstractmethod
    def dims(self, values: dict) -> dict:
        """The model builder's task-dependent arguments (vocab_size, max_len, pad_id, ...) from
        `values`: the params of a grid task, a configuration's settings of the others."""

    @abstractmethod
    def listed(self, params: dict) -> list[tuple[tuple, tuple]]:
        """(key, seeds) of every configuration these params ask for, in dvc.yaml's order:
        `config(params, *key, seeds=seeds)` builds it. Reads only the lists that name them."""

    @abstractmethod
    def config(self, params: dict, *key, seeds=()) -> Config:
        """The configuration `key` names (one of `listed`'s), its values read from params."""

    def configs(self, params: dict, run: str | None = None) -> list[Config]:
        """Every configuration these params ask for, in dvc.yaml's order. Listing them reads
        the lists that name them (a report that reads its runs' records reads those), not their
        values. run: only the configuration that trains the run of that name ([] if none
        does), found without reading the lists and built from the params themselves, so that
        the stage that trains or reads it records its values as its reads (lookup.find)."""
        plain = unrecorded(params)
        listed = [self.config(plain, *key, seeds=seeds)
                  for key, seeds in self.listed(params if run is None else plain)]
        if run is None:
            return listed
        return [self.config(params, *c.key, seeds=c.seeds) for c in listed
                if any(r.name == run for r in c.runs)]

    def runs(self, params: dict) -> list[Run]:
        """Every training run these params ask for, in dvc.yaml's order."""
        return [run for c in self.configs(params) for run in c.runs]

    @abstractmethod
    def data(self, run: Run, params: dict, device, trial: bool = False) -> Data:
        """What the run trains and validates on, and what the data decides of its architecture
        and loop. trial: without the files earlier stages write, on data made in memory with
        the same shapes (`arithrepro estimate` times runs so)."""

    def scores(self, run: Run, built: Built, result: dict, summary: dict, params: dict):
        """A task scored as it trains: (its record's fields after the head (Run.head; the
        runner adds the provenance last), the table of its scores at every evaluation (a
        DataFrame, written to Files.curve) or None), from the training's result and its summary
        (train.json's fields). None: the run is scored after training (the evaluate stage)."""
        return None


class GridTask(Task):
    grid = True   # trained and scored as <task>.models x <task>.sizes x <task>.seeds cells
    # the registry models whose budget fields its <task>.model block sets, on every task (a
    # fact of its params block)

    @abstractmethod
    def generate(self, params: dict, out_dir: Path, progress=None) -> str:
        """Write the dataset files under out_dir; return a one-line summary."""

    @abstractmethod
    def train_batches(self, params: dict, data_dir: Path, seed: int, device):
        """The training run's batches: an EpochBatches or a StreamBatches (arithrepro/batches.py)."""

    @abstractmethod
    def valid_set(self, params: dict, data_dir: Path, device):
        """(make_batch(idx) -> (x, y, mask), n): the validation split the loop scores."""

    @abstractmethod
    def evaluate(self, model, params: dict, data_dir: Path, device, progress=None):
        """(metrics, rows): the run record's scores and the per-problem (or per-cell) rows."""

    def listed(self, params: dict) -> list[tuple[tuple, tuple]]:
        p = params[self.name]
        return [((model, size), tuple(p["seeds"])) for model in p["models"] for size in p["sizes"]]

    def config(self, params: dict, model: str, size: str, home: str = "", seeds=()) -> Config:
        """`model` at `size` under <task>.train and <task>.data, with the model's lr, dropout
        and micro-batches (models.<model>); home "bench": a benchmark configuration."""
        m, loop = params["models"][model], params[self.name]["train"]
        arch = {"model": model, "size": architecture(params, model, size),
                "dropout": float(m["dropout"]), "dims": self.dims(params),
                "form": form_for(self, model)}
        return Config(self.name, model, size, seeds, arch, dict(
            lr=float(m["lr"]), optimizer=loop["optimizer"], schedule=loop["schedule"],
            warmup_frac=float(loop["warmup_frac"]), weight_decay=float(loop["weight_decay"]),
            restore_best=loop["keep"] == "best",
            # the progressive loss exits a looped block early: only a model whose block loops
            # (abacus) has exits to train
            progressive=bool(loop.get("progressive", False)) and MODELS[model].loops,
            val_every=loop["val_every"], checkpoint_every=loop["checkpoint_every"],
            eval_batch_size=4 * loop["batch_size"], micro_batches=int(m["micro_batches"])),
            {"budget": loop, "data": params[self.name]["data"]}, home=home,
            key=(model, size, home),
            stage=f"train-bench-{self.name}-{model}" if home else f"train-{self.name}",
            item=() if home else (model, size))

    def data(self, run: Run, params: dict, device, trial: bool = False) -> Data:
        """The data stage's files; trial: batches made in memory (`sample_batches`), the
        validation set one evaluation batch of them, scored as often as the split's size."""
        import torch

        if not trial:
            data_dir = data_dir_of(self.name)
            return Data(self.train_batches(params, data_dir, run.seed, device),
                        self.valid_set(params, data_dir, device),
                        files=sorted(p for p in data_dir.rglob("*") if p.is_file()))
        batches = self.sample_batches(params, run.seed, device)
        batch = params[self.name]["train"]["batch_size"]
        rows = self.valid_count(params)
        parts = [batches(i) for i in range(-(-min(4 * batch, rows) // batch))]
        x, y, mask = (torch.cat(t) for t in zip(*parts))
        return Data(batches, ((lambda idx: (x[idx % len(x)], y[idx % len(x)], mask[idx % len(x)])),
                              rows))

    def generate_count(self, params: dict) -> int | None:
        """Problems generate() writes (a progress bar's total; None: unknown)."""
        return None

    def eval_count(self, params: dict, model) -> int | None:
        """Problems evaluate() decodes (a progress bar's total; None: unknown)."""
        return None

    def valid_count(self, params: dict) -> int:
        """Samples in one validation pass."""
        return params[self.name]["data"]["n_valid"]

    def sample_batches(self, params: dict, seed: int, device):
        """The training run's batches made without files (for timing)."""
        return self.train_batches(params, None, seed, device)

    @classmethod
    def grid_schema(cls) -> dict:
        return {
            "models": list_of(choice(*(m for m, s in MODELS.items() if s.grid))),
            "sizes": list_of(_size_name),
            "seeds": list_of(integer(0, 2**31 - 1)),
        }

    @classmethod
    def check_grid(cls, params: dict) -> None:
        """Every size of <task>.sizes exists for every model of <task>.models, and the
        architecture (size + the task's width block) is consistent."""
        for model in params[cls.name]["models"]:
            spec = MODELS[model]
            if meeting(spec, cls.forms) is None:
                raise ParamsError(f"{cls.name}.models: " + refusal(cls.name, cls.forms, model, spec))
            if spec.form != cls.forms[0]:
                raise ParamsError(f"{cls.name}.models: {model} takes {spec.form}, not {cls.name}'s "
                                  f"own form ({cls.forms[0]}); the benchmark trains it on "
                                  f"{cls.name} (bench.seeds; docs/bench.md)")
            known = params["models"][model]["sizes"]
            for size in params[cls.name]["sizes"]:
                if size not in known:
                    raise ParamsError(f"{cls.name}.sizes: {size!r} is not a size of {model}; "
                                      f"allowed: {', '.join(known)} (models.{model}.sizes)")
                if MODELS[model].budget_fields:
                    MODELS[model].check_size(MODELS[model].budget_from,
                                             architecture(params, model, size))

    @staticmethod
    def require(data_dir: Path, name: str) -> Path:
        path = Path(data_dir) / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run `arithrepro generate-datasets` first")
        return path

    @classmethod
    def read_split(cls, data_dir: Path, name: str, columns: tuple[str, ...]):
        """A data file as a DataFrame with at least `columns` (ArtifactError if damaged)."""
        from arithrepro.io import read_frame

        return read_frame(cls.require(data_dir, name), columns)

    @classmethod
    def read_meta(cls, data_dir: Path, keys: tuple[str, ...]) -> dict:
        """meta.json as a dict with at least `keys` (ArtifactError if damaged)."""
        from arithrepro.io import read_json

        return read_json(cls.require(data_dir, "meta.json"), keys)


class StreamTask(GridTask):
    """A grid task that draws fresh training samples every step (no training file)."""

    @abstractmethod
    def train_sampler(self, params: dict, device):
        """draw(batch_size, generator) -> (x, y, mask): fresh training samples."""

    @staticmethod
    def stream_train_schema(**extra) -> dict:
        """<task>.train for tasks that draw fresh samples every step: the loop and its steps."""
        return train_schema(batch_size=integer(1), steps=integer(1), val_every=integer(1),
                            checkpoint_every=integer(1), **extra)

    def train_batches(self, params: dict, data_dir: Path, seed: int, device):
        from arithrepro.batches import StreamBatches

        t = params[self.name]["train"]
        return StreamBatches(self.train_sampler(params, device), t["batch_size"], t["steps"], seed)
