"""What every task shares: the params blocks of its grid and training loop, and the default
ways to draw training batches and check files.

A task provides (see expr.py, abacus.py, looped.py):
    params_schema() / profile_schema() / check_params(params)  its params.yaml blocks
    generate(params, out_dir, progress) -> summary; generate_count(params)
    dims(params) -> the model builder's task-dependent arguments
    train_batches(params, data_dir, seed, device) -> EpochBatches | StreamBatches (train.py)
    sample_batches(params, seed, device) -> the same run's batches made in memory (estimate)
    valid_set(params, data_dir, device) -> (make_batch(idx) -> (x, y, mask), n)
    evaluate(model, params, data_dir, device, progress) -> (metrics, rows); eval_count(...)
"""

from __future__ import annotations

from pathlib import Path

from arithrepro.config import (Optional, ParamsError, choice, fail, integer, list_of, number)


LOOP_KEYS = ("optimizer", "schedule", "warmup_frac", "weight_decay", "keep")


def train_schema(**extra) -> dict:
    """<task>.train: the loop's settings as the task's source states them (a profile may
    override each of them in profiles.<p>.<task>.train, with its reason beside it)."""
    return {
        "optimizer": choice("lamb", "adam", "adamw"),
        "schedule": choice("linear", "constant"),
        "warmup_frac": number(0, 1, hi_open=True),
        "weight_decay": number(0),
        "keep": choice("best", "last"),   # the state a run ends with: best validation, or last
        **extra,
    }


def loop_overrides() -> dict:
    """The loop settings a profile's train block may override."""
    return {k: Optional(v) for k, v in train_schema().items()}


def loop_config(params: dict, task: str) -> dict:
    """<task>.train with the current profile's overrides of LOOP_KEYS."""
    prof = params["profiles"][params["profile"]][task]["train"]
    return {**params[task]["train"], **{k: prof[k] for k in LOOP_KEYS if k in prof}}


class TaskBase:
    name = ""
    model_kind = "lm"
    grid = True   # trained and scored as <task>.models x <task>.sizes x <task>.seeds cells
    # the precision the source trained in on a GPU (params precision: auto follows it):
    # fp32, or mixed (bf16 autocast where the GPU has it, else fp16 with a gradient scaler)
    precision = "fp32"
    headline = ("id_acc", "ood_acc")   # the metrics a stage's summary line shows

    @classmethod
    def grid_schema(cls) -> dict:
        from arithrepro.models import MODELS

        return {
            "models": list_of(choice(*(m for m, s in MODELS.items()
                                        if s.kind == cls.model_kind and s.grid))),
            "sizes": list_of(lambda key, v: None if isinstance(v, str) else fail(key, v, "a size name")),
            "seeds": list_of(integer(0, 2**31 - 1)),
        }

    @staticmethod
    def profile_grid_schema() -> dict:
        """profiles.<p>.<task>.{sizes,seeds}: the profile's grid, which conf/config.yaml makes
        <task>.sizes and <task>.seeds when params.yaml is composed (README: profiles)."""
        return {"sizes": list_of(lambda key, v: None if isinstance(v, str) else fail(key, v, "a size name")),
                "seeds": list_of(integer(0, 2**31 - 1))}

    @staticmethod
    def stream_train_schema() -> dict:
        """profiles.<p>.<task>.train for tasks that draw fresh samples every step."""
        return {"batch_size": integer(1), "steps": integer(1), "val_every": integer(1),
                "checkpoint_every": integer(1), "lr": Optional(number(0, lo_open=True)),
                **loop_overrides()}

    @classmethod
    def check_grid(cls, params: dict) -> None:
        """Every size of <task>.sizes and of each profile's grid exists for every model of
        <task>.models, and the merged architecture (size + the profile's width) is consistent."""
        from arithrepro.config import architecture
        from arithrepro.models import MODELS

        grids = {f"{cls.name}.sizes": params[cls.name]["sizes"],
                 **{f"profiles.{p}.{cls.name}.sizes": block[cls.name]["sizes"]
                    for p, block in params["profiles"].items()}}
        for model in params[cls.name]["models"]:
            known = params["models"][model]["sizes"]
            for key, sizes in grids.items():
                for size in sizes:
                    if size not in known:
                        raise ParamsError(f"{key}: {size!r} is not a size of {model}; "
                                          f"allowed: {', '.join(known)} (models.{model}.sizes)")
            if not MODELS[model].budget_fields:
                continue
            for profile, block in params["profiles"].items():
                sizes = set(block[cls.name]["sizes"])
                if profile == params["profile"]:
                    sizes |= set(params[cls.name]["sizes"])
                for size in sorted(sizes):
                    MODELS[model].check_size(f"profiles.{profile}.{cls.name}.model",
                                             architecture(params, cls.name, model, size, profile))

    def train_batches(self, params: dict, data_dir: Path, seed: int, device):
        from arithrepro.train import StreamBatches

        t = params["profiles"][params["profile"]][self.name]["train"]
        return StreamBatches(self.train_sampler(params, device), t["batch_size"], t["steps"], seed)

    def sample_batches(self, params: dict, seed: int, device):
        """The training run's batches made without files (for timing): a stream task's own."""
        return self.train_batches(params, None, seed, device)

    def valid_count(self, params: dict) -> int:
        """Samples in one validation pass."""
        return params["profiles"][params["profile"]][self.name]["data"]["n_valid"]

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


