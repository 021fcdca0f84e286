"""The parameters: composing them from conf/, loading params.yaml, validating it, and the
resolved view each stage reads.

conf/config.yaml holds each experiment as its source ran it and conf/profile/<name>.yaml the
budgets a profile changes (Hydra config groups). params.yaml is their composition for one
profile (DVC composes it for `dvc exp run`, `compose` here for `dvc repro`), so every other
module reads one resolved block per task and never asks which profile made it: this module is
the only one that knows profiles exist.

Validation runs before any work. A bad file stops with one line naming the key, the value and
what is allowed; nothing is written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from arithrepro import bench, llm
from arithrepro.cpu import schema as cpu_schema
from arithrepro.device import DEVICES, PRECISIONS, resolve_device, resolve_precision
from arithrepro.models.registry import MODELS
from arithrepro.params_reads import recording
from arithrepro.schema import (Map, ParamsError, check_schema, choice, did_you_mean,
                               fail, integer, list_of, number)
from arithrepro.tasks.registry import TASKS

CONF = Path("conf")
# The header of a params.yaml this module writes: the file is generated.
GENERATED = ("# Generated from conf/config.yaml and conf/profile/{profile}.yaml: edit those, then\n"
             "# `arithrepro compose-params` (`dvc exp run` composes its own). Do not edit.\n")


def _compile_setting(key, value) -> None:
    """false, true, or a torch.compile mode (reduce-overhead: CUDA graphs)."""
    if value is not False and value is not True and value not in ("reduce-overhead", "max-autotune"):
        fail(key, value, "false, true, reduce-overhead or max-autotune")


def _graphs_setting(key, value) -> None:
    """false, true, or auto (on wherever the static step can run: see resolve_graphs)."""
    if value is not False and value is not True and value != "auto":
        fail(key, value, "false, true or auto")


def resolve_graphs(setting, device: str, precision: str, world: int = 1) -> bool:
    """Whether the training step runs as CUDA graphs (train/graphs.py). true asks for it on a
    GPU (and a combination it cannot run is refused); auto takes it wherever it can run: on a
    GPU, one process, not fp16 (whose gradient scaler reads the device every step)."""
    if not device.startswith("cuda"):
        return False
    if setting == "auto":
        return world == 1 and precision != "fp16"
    return bool(setting)


def _name(key, value) -> None:
    """A profile's name; one that conf/profile/ defines where the params are read beside it
    (a misspelt `profile:` typed into params.yaml would otherwise label a run wrongly)."""
    if not isinstance(value, str) or not re.fullmatch(r"[a-z0-9_-]+", value):
        fail(key, value, "a profile name (lower-case letters, digits, - and _)")
    known = profiles() if (CONF / "profile").is_dir() else []
    if known and value not in known:
        fail(key, value, f"one of the profiles in {CONF / 'profile'}/: {', '.join(known)}"
                         f"{did_you_mean(value, known)}")


# --- the params.yaml schema ------------------------------------------------------------------

def schema() -> dict:
    return {
        "profile": _name,   # which profile composed the file: a label, read by no stage
        "device": choice(*DEVICES),
        "precision": choice(*PRECISIONS),
        "compile": _compile_setting,
        "graphs": _graphs_setting,
        "cpu": cpu_schema(),
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
        "bench": bench.schema(),
        "llm": llm.schema(),
        "tuning": {"seeds": list_of(integer(0), min_len=0), "tuned": list_of(_seeds_key, min_len=0)},
        "claims": {"targets": list_of(choice("modular-source"), min_len=0)},
    }


def _seeds_key(key, value) -> None:
    if not isinstance(value, str) or not value.endswith(".seeds"):
        fail(key, value, "a params key naming a list of seeds (<...>.seeds)")


def check_tuning(params: dict) -> None:
    """No list of seeds whose recipe was chosen on the tuning seeds holds one of them: every
    verdict comes from seeds no choice looked at (docs/profiles.md, "Tuning seeds")."""
    tuning = set(params["tuning"]["seeds"])
    for i, key in enumerate(params["tuning"]["tuned"]):
        node = params
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ParamsError(f"tuning.tuned[{i}] = {key!r}: no such params key")
            node = node[part]
        used = sorted(tuning & set(node or []))
        if used:
            raise ParamsError(f"{key} = {node}: {used} {'is a tuning seed' if len(used) == 1 else 'are tuning seeds'} "
                              f"(tuning.seeds), which chose this recipe; use other seeds")


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
    bench.check(params)
    llm.check(params)
    check_tuning(params)
    return params


class _Loader(yaml.SafeLoader):
    """YAML 1.2 floats: `1e-3` is a number (as DVC's `-S` writes it), not the string PyYAML's
    YAML 1.1 rules make of it. A quoted value stays a string and is refused where a number is due."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _parse(path: Path) -> Any:
    if not path.is_file():
        raise ParamsError(f"{path}: no such params file")
    try:
        return yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        where = f" (line {line + 1})" if line is not None else ""
        raise ParamsError(f"{path}: not valid YAML{where}") from None


def load(path: str | Path = "params.yaml", record: bool = True) -> dict:
    """params.yaml, validated; its reads recorded (params_reads.py) unless `record` is False
    (a command that is no stage: repro)."""
    params = validate(_parse(Path(path)))
    return recording(params) if record else params


# --- composing params.yaml from conf/ ----------------------------------------------------------

def profiles(conf: str | Path = CONF) -> list[str]:
    """The profiles conf/profile/ defines."""
    folder = Path(conf) / "profile"
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: missing (the profiles' config group)")
    return sorted(p.stem for p in folder.glob("*.yaml"))


def compose(overrides: list[str] | tuple[str, ...] = (), conf: str | Path = CONF) -> dict:
    """params as `dvc exp run -S <overrides>` composes them (DVC's own composition), validated.
    A bad override, key or profile is a ParamsError naming it."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "params.yaml"
        _compose_to(out, list(overrides), Path(conf))
        return _checked(out, overrides, Path(conf))


def write(out: str | Path, overrides: list[str] | tuple[str, ...] = (),
          conf: str | Path = CONF) -> dict:
    """Compose and write params.yaml (with its generated-file header) through a temporary file
    beside it, validated before it replaces the old one: a failure leaves the old file as it was."""
    import os
    import tempfile

    out = Path(out)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".yaml")
    os.close(fd)
    tmp = Path(tmp)   # DVC picks its dumper by the suffix
    try:
        _compose_to(tmp, list(overrides), Path(conf))
        params = _checked(tmp, overrides, Path(conf))
        tmp.write_text(GENERATED.format(profile=params["profile"]) + tmp.read_text())
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return params


def _compose_to(out: Path, overrides: list[str], conf: Path) -> None:
    if not (conf / "config.yaml").is_file():
        raise FileNotFoundError(f"{conf / 'config.yaml'}: missing (the params' source)")
    known = profiles(conf)
    for o in overrides:
        name = o.partition("=")[2] if o.startswith("profile=") else None
        if name is not None and name not in known:
            raise ParamsError(f"profile={name}: no such profile{did_you_mean(name, known)}; "
                              f"profiles: {', '.join(known)} (conf/profile/)")
    from dvc.utils.hydra import compose_and_dump

    try:
        compose_and_dump(out, str(conf.resolve()), None, "config", str(Path.cwd()), overrides)
    except Exception as err:  # Hydra's and OmegaConf's errors: a bad override, key or profile
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ParamsError(f"{conf / 'config.yaml'} with {shown(overrides)}: "
                          f"{_readable(first, overrides)}{_nearest_key(first, conf)}") from None


def _readable(message: str, overrides: list[str]) -> str:
    """Hydra's parser message for an override it cannot read, said as what is wrong with it:
    the override that opens a list, a mapping or a quote it does not close."""
    if not any(w in message for w in ("no viable alternative", "NoViableAlt", "mismatched input",
                                      "extraneous input")):
        return message
    for o in overrides:
        value = o.partition("=")[2]
        for opens, closes in (("[", "]"), ("{", "}"), ("(", ")")):
            if value.count(opens) != value.count(closes):
                return (f"{o}: unbalanced {opens}{closes} (a list is [a,b], a mapping {{k: v}}; "
                        "quote the whole override in the shell)")
        if value.count("'") % 2 or value.count('"') % 2:
            return f"{o}: an unclosed quote"
    return f"an override Hydra cannot parse ({message})"


def _nearest_key(message: str, conf: Path) -> str:
    """For Hydra's "Could not override 'a.b.c'": ' (did you mean a.b.x?)', the key of
    conf/config.yaml's block a.b most like c, or nothing."""
    import yaml

    found = re.search(r"Could not override '([^']+)'", message)
    if not found:
        return ""
    *path, last = found.group(1).split(".")
    node = yaml.safe_load((conf / "config.yaml").read_text())
    for k in path:
        if not isinstance(node, dict) or k not in node:
            return ""
        node = node[k]
    return did_you_mean(last, node, ".".join(path)) if isinstance(node, dict) else ""


def _checked(path: Path, overrides, conf: Path) -> dict:
    """The composed file validated; an error names the composition it came from."""
    try:
        return validate(_parse(path))
    except ParamsError as err:
        raise ParamsError(f"{err} (composed from {conf}/ with {shown(overrides)})") from None


def shown(overrides) -> str:
    """The overrides as a message shows them: each as typed, quoted if it holds a character a
    line cannot show (a newline, a control character)."""
    return " ".join(o if o.isprintable() else repr(o) for o in overrides) or "no overrides"


def validate_profiles(conf: str | Path = CONF) -> dict[str, dict]:
    """Every profile of conf/ composed and validated: {profile: params}."""
    return {p: compose([f"profile={p}"], conf) for p in profiles(conf)}


def known_task(task: str) -> None:
    """Check a task's name given on the command line."""
    if task not in TASKS:
        raise ParamsError(f"--task = {task!r}: expected one of {', '.join(TASKS)}")


def grid_task(task: str) -> None:
    """Check a grid task's name given on the command line."""
    known_task(task)
    if not TASKS[task].grid:
        raise ParamsError(f"--task = {task!r}: not a grid task; it runs as its own stages "
                          f"(`dvc repro` runs them; see dvc.yaml)")


def device_of(params: dict) -> str:
    """The device the params ask for, resolved on this machine (for stages that do not train)."""
    return resolve_device(params["device"])


def placement(params: dict, task: str) -> tuple[str, str]:
    """(device, precision) the params ask for `task`, resolved on this machine."""
    device = resolve_device(params["device"])
    return device, resolve_precision(params["precision"], device, TASKS[task].precision)
