"""params.yaml: loading, validation and the resolved view each stage reads.

Validation runs before any work. A bad file stops with one line naming the key, the value and
what is allowed; nothing is written.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

PROFILES = ("smoke", "cpu", "paper")


class ParamsError(Exception):
    """A params.yaml (or command-line) value that is not allowed; the message is one line."""


# --- a small declarative schema -------------------------------------------------------------
# A schema is a dict (fixed keys -> schema), a Map (free keys -> schema) or a leaf check.
# Leaf checks take (key, value) and raise ParamsError.

Check = Callable[[str, Any], None]


def fail(key: str, value: Any, allowed: str) -> None:
    raise ParamsError(f"{key} = {value!r}: expected {allowed}")


def integer(lo: int | None = None, hi: int | None = None) -> Check:
    def check(key, value):
        rng = _range_text(lo, hi)
        if isinstance(value, bool) or not isinstance(value, int):
            fail(key, value, f"an integer{rng}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            fail(key, value, f"an integer{rng}")

    return check


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           hi_open: bool = False) -> Check:
    def check(key, value):
        rng = _range_text(lo, hi, lo_open, hi_open)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(key, value, f"a number{rng}")
        bad_lo = lo is not None and (value <= lo if lo_open else value < lo)
        bad_hi = hi is not None and (value >= hi if hi_open else value > hi)
        if bad_lo or bad_hi or value != value:
            fail(key, value, f"a number{rng}")

    return check


def boolean(key, value) -> None:
    if not isinstance(value, bool):
        fail(key, value, "true or false")


def _compile_setting(key, value) -> None:
    """false, true, or a torch.compile mode (reduce-overhead: CUDA graphs)."""
    if value is not False and value is not True and value not in ("reduce-overhead", "max-autotune"):
        fail(key, value, "false, true, reduce-overhead or max-autotune")


def choice(*allowed: str) -> Check:
    def check(key, value):
        if value not in allowed:
            fail(key, value, "one of " + ", ".join(allowed))

    return check


def list_of(item: Check, min_len: int = 1, unique: bool = True) -> Check:
    def check(key, value):
        if not isinstance(value, list) or len(value) < min_len:
            fail(key, value, f"a list of at least {min_len} item(s)")
        for i, v in enumerate(value):
            item(f"{key}[{i}]", v)
        if unique and len({repr(v) for v in value}) != len(value):
            fail(key, value, "a list without repeats")

    return check


class Optional:
    """A key of a fixed mapping that may be left out."""

    def __init__(self, schema: Any):
        self.schema = schema


class Map:
    """A mapping with free keys (e.g. model sizes); `keys` restricts them when given."""

    def __init__(self, value_schema: Any, keys: tuple[str, ...] | None = None, min_len: int = 1):
        self.value_schema, self.keys, self.min_len = value_schema, keys, min_len


def _range_text(lo, hi, lo_open=False, hi_open=False) -> str:
    if lo is not None and hi is not None:
        return f" in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f" {'<' if hi_open else '<='} {hi}"
    return ""


def check_schema(schema: Any, value: Any, key: str) -> None:
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            fail(key, value, "a mapping with keys " + ", ".join(schema))
        for k in value:
            if k not in schema:
                raise ParamsError(f"{_join(key, k)}: unknown key; allowed: {', '.join(schema)}")
        for k, sub in schema.items():
            if isinstance(sub, Optional):
                if k in value:
                    check_schema(sub.schema, value[k], _join(key, k))
                continue
            if k not in value:
                raise ParamsError(f"{_join(key, k)}: missing")
            check_schema(sub, value[k], _join(key, k))
    elif isinstance(schema, Map):
        if not isinstance(value, dict) or len(value) < schema.min_len:
            fail(key, value, f"a mapping with at least {schema.min_len} entry")
        for k, v in value.items():
            if schema.keys is not None and k not in schema.keys:
                raise ParamsError(f"{_join(key, k)}: unknown key; allowed: {', '.join(schema.keys)}")
            check_schema(schema.value_schema, v, _join(key, k))
    else:
        schema(key, value)


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def all_optional(schema: Any) -> Any:
    """The same schema with every key optional: a profile overrides what it names."""
    if isinstance(schema, dict):
        return {k: Optional(all_optional(v.schema if isinstance(v, Optional) else v))
                for k, v in schema.items()}
    return schema


def deep_merge(base: dict, over: dict) -> dict:
    """base with over's keys replacing its own, mappings merged key by key (lists replaced)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = (deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict)
                  else copy.deepcopy(v))
    return out


def check_merged(params: dict, task: str, schema: Any) -> dict:
    """A task block with the current profile's overrides merged in, checked against the
    block's schema; returns the merged block."""
    merged = deep_merge(params[task], params["profiles"][params["profile"]][task])
    try:
        check_schema(schema, merged, task)
    except ParamsError as err:
        raise ParamsError(f"{err} (after merging profiles.{params['profile']}.{task} "
                          f"over {task})") from None
    return merged


# --- the params.yaml schema ------------------------------------------------------------------

def schema() -> dict:
    from arithrepro.device import DEVICES, PRECISIONS
    from arithrepro.models import MODELS
    from arithrepro.tasks import TASKS

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
                "micro_batches": Optional(integer(1, 4096)),
                "sizes": Map(spec.size_schema()),
            }
            for name, spec in MODELS.items() if spec.grid
        },
        **{t: task.params_schema() for t, task in TASKS.items()},
    }


def validate(params: Any) -> dict:
    """Check the whole file; return it unchanged. Raises ParamsError with a one-line message."""
    from arithrepro.models import MODELS
    from arithrepro.tasks import TASKS

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
    return validate(params)


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
    from arithrepro.models import MODELS
    from arithrepro.tasks import TASKS as tasks

    if task not in tasks:
        raise ParamsError(f"--task = {task!r}: expected one of {', '.join(tasks)}")
    if not tasks[task].grid:
        raise ParamsError(f"--task = {task!r}: not a grid task; it runs as its own stages "
                          f"(`dvc repro` runs them; see dvc.yaml)")
    allowed_models = params[task]["models"]
    if model not in allowed_models or model not in MODELS:
        raise ParamsError(f"--model = {model!r}: expected one of {', '.join(allowed_models)} ({task}.models)")
    sizes = params["models"][model]["sizes"]
    if size not in sizes:
        raise ParamsError(f"--size = {size!r}: expected one of {', '.join(sizes)} (models.{model}.sizes)")
    if seed < 0:
        raise ParamsError(f"--seed = {seed!r}: expected an integer >= 0")
    return Cell(task, model, size, seed)


def with_profile(params: dict, profile: str) -> dict:
    """params switched to `profile` as composing conf/config.yaml with profile=<profile> makes
    them: the profile's name, and each grid task's sizes and seeds from the profile's block."""
    from arithrepro.tasks import TASKS

    out = {**params, "profile": profile}
    for name, task in TASKS.items():
        if task.grid:
            block = params["profiles"][profile][name]
            out[name] = {**params[name], "sizes": block["sizes"], "seeds": block["seeds"]}
    return out


def profile_block(params: dict, task: str) -> dict:
    return params["profiles"][params["profile"]][task]


def architecture(params: dict, task: str, model: str, size: str, profile: str | None = None) -> dict:
    """A model's architecture fields: its size, plus the fields a task's profile sets (width)."""
    from arithrepro.models import MODELS

    arch = dict(params["models"][model]["sizes"][size])
    budget = params["profiles"][profile or params["profile"]][task].get("model", {})
    arch.update({k: budget[k] for k in MODELS[model].budget_fields})
    return arch
