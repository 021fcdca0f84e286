"""params.yaml: loading, validation and the resolved view each stage reads.

Validation runs before any work. A bad file stops with one line naming the key, the value and
what is allowed; nothing is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from arithrepro.device import DEVICES, PRECISIONS, resolve_device, resolve_precision
from arithrepro.models.registry import MODELS
from arithrepro.params_reads import peek, recording
from arithrepro.schema import Map, ParamsError, check_schema, choice, fail, integer, number
from arithrepro.tasks.registry import TASKS

PROFILES = ("smoke", "cpu", "paper")


def _compile_setting(key, value) -> None:
    """false, true, or a torch.compile mode (reduce-overhead: CUDA graphs)."""
    if value is not False and value is not True and value not in ("reduce-overhead", "max-autotune"):
        fail(key, value, "false, true, reduce-overhead or max-autotune")


# --- the params.yaml schema ------------------------------------------------------------------

def schema() -> dict:
    return {
        "profile": choice(*PROFILES),
        "device": choice(*DEVICES),
        "precision": choice(*PRECISIONS),
        "compile": _compile_setting,
        "profiles": {p: {t: task.profile_schema() for t, task in TASKS.items()} for p in PROFILES},
        "models": {
            name: {
                "lr": number(0, lo_open=True),
                "dropout": number(0, 1, hi_open=True),
                "micro_batches": integer(1, 4096),  # CPU only: >1 cuts a batch into pieces
                "sizes": Map(spec.size_schema()),
            }
            for name, spec in MODELS.items() if spec.grid
        },
        **{t: task.params_schema() for t, task in TASKS.items()},
    }


def validate(params: Any) -> dict:
    """Check the whole file; return it unchanged. Raises ParamsError with a one-line message."""
    if not isinstance(params, dict):
        raise ParamsError("params: expected a mapping at the top level")
    check_schema(schema(), params, "")
    for name, spec in MODELS.items():
        if spec.grid and not spec.budget_fields:
            for size, cfg in params["models"][name]["sizes"].items():
                spec.check_size(f"models.{name}.sizes.{size}", cfg)
    for task in TASKS.values():
        task.check_params(params)
    return params


class _Loader(yaml.SafeLoader):
    """YAML 1.2 floats: `1e-3` is a number (as DVC's `-S` writes it), not the string PyYAML's
    YAML 1.1 rules make of it. A quoted value stays a string and is refused where a number is due."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load(path: str | Path = "params.yaml") -> dict:
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: no such params file")
    try:
        params = yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        where = f" (line {line + 1})" if line is not None else ""
        raise ParamsError(f"{path}: not valid YAML{where}") from None
    return recording(validate(params))


# --- the resolved view of one grid cell ------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    task: str
    model: str
    size: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.model}-{self.size}-{self.seed}"


def cell(params: dict, task: str, model: str, size: str, seed: int) -> Cell:
    """Check a grid cell given on the command line against params.yaml."""
    if task not in TASKS:
        raise ParamsError(f"--task = {task!r}: expected one of {', '.join(TASKS)}")
    if not TASKS[task].grid:
        raise ParamsError(f"--task = {task!r}: not a grid task; it runs as its own stages "
                          f"(`dvc repro` runs them; see dvc.yaml)")
    # membership checks stop a run but cannot change its result: not recorded as reads
    allowed_models = peek(params, task, "models")
    if model not in allowed_models or model not in MODELS:
        raise ParamsError(f"--model = {model!r}: expected one of {', '.join(allowed_models)} ({task}.models)")
    sizes = peek(params, "models", model, "sizes")
    if size not in sizes:
        raise ParamsError(f"--size = {size!r}: expected one of {', '.join(sizes)} (models.{model}.sizes)")
    if seed < 0:
        raise ParamsError(f"--seed = {seed!r}: expected an integer >= 0")
    return Cell(task, model, size, seed)


def with_profile(params: dict, profile: str) -> dict:
    """params switched to `profile` as composing conf/config.yaml with profile=<profile> makes
    them: the profile's name, and each grid task's sizes and seeds from the profile's block."""
    out = {**params, "profile": profile}
    for name, task in TASKS.items():
        if task.grid:
            block = params["profiles"][profile][name]
            out[name] = {**params[name], "sizes": block["sizes"], "seeds": block["seeds"]}
    return out


def profile_block(params: dict, task: str) -> dict:
    return params["profiles"][params["profile"]][task]


def device_of(params: dict) -> str:
    """The device the params ask for, resolved on this machine (for stages that do not train)."""
    return resolve_device(params["device"])


def placement(params: dict, task: str) -> tuple[str, str]:
    """(device, precision) the params ask for `task`, resolved on this machine."""
    device = resolve_device(params["device"])
    return device, resolve_precision(params["precision"], device, TASKS[task].precision)
