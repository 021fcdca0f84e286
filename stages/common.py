"""What every stage shares: the file layout, the --params/--task/... options and error handling."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from arithrepro.schema import ParamsError
from arithrepro.io import ArtifactError


class paths:
    """The pipeline's file layout (relative to the repository root, where DVC runs stages)."""

    @staticmethod
    def data(task: str) -> Path:
        return Path("data") / task

    @staticmethod
    def run(task: str, cell: str) -> Path:
        return Path("runs") / task / cell

    @staticmethod
    def live(task: str, cell: str) -> Path:
        """A grid cell's training series (dvclive's folder: metrics.json, params.yaml,
        plots/metrics/{train,val}/*.tsv)."""
        return Path("runs") / task / cell / "live"

    @staticmethod
    def evaluation(task: str, cell: str | None = None) -> Path:
        """Per-cell evaluation rows: by length (expr, looped), by operand digits (abacus)."""
        d = Path("plots") / task / "eval"
        return d if cell is None else d / f"{cell}.csv"

    @staticmethod
    def record(task: str, cell: str | None = None) -> Path:
        d = Path("metrics") / task / "runs"
        return d if cell is None else d / f"{cell}.json"

    metrics = Path("metrics")
    plots = Path("plots")


class TaskName(click.ParamType):
    """A task name, listed from the task registry when help is shown (so listing the commands
    does not import the tasks, and torch with them). `check`: refuse other names here (else
    the command checks them and says why in one line)."""

    name = "task"

    def __init__(self, grid: bool = False, check: bool = False):
        self.grid, self.check = grid, check

    def names(self) -> list[str]:
        from arithrepro.tasks.registry import TASKS

        return [n for n, t in TASKS.items() if t.grid or not self.grid]

    def get_metavar(self, *args, **kwargs) -> str:
        return "[" + "|".join(self.names()) + "]"

    def convert(self, value, param, ctx):
        if self.check and value not in self.names():
            self.fail(f"{value!r} is not one of {', '.join(self.names())}", param, ctx)
        return value


params_option = click.option(
    "--params", "params_path", default="params.yaml", show_default=True,
    type=click.Path(dir_okay=False), help="The params file (validated before any work).")


def cell_options(f):
    """--task --model --size --seed: one cell of the grid."""
    for opt in reversed([
        click.option("--task", required=True, type=TaskName(grid=True), help="A grid task."),
        click.option("--model", required=True, help="Model name, one of <task>.models."),
        click.option("--size", required=True, help="Size name, one of models.<model>.sizes."),
        click.option("--seed", required=True, type=int, help="Seed of the run."),
    ]):
        f = opt(f)
    return f


def friendly_errors(f):
    """Expected failures end as one line on stderr and a non-zero exit, without a traceback;
    a damaged file's line names the command that rebuilds it."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        import warnings

        from arithrepro.train import NonFiniteLoss

        # a warning is one line too (Python's default adds the source line that raised it)
        shown = warnings.formatwarning
        warnings.formatwarning = lambda message, *_, **__: f"warning: {message}\n"
        try:
            return f(*args, **kwargs)
        except ParamsError as err:
            _die(f"params: {err}", 2)
        except ArtifactError as err:
            rebuild = err.rebuild or rebuild_command(err.path)
            _die(str(ArtifactError(err.path, err.problem, rebuild)), 1)
        except (FileNotFoundError, NonFiniteLoss, ValueError) as err:
            _die(str(err), 1)
        finally:
            warnings.formatwarning = shown

    return wrapper


def _die(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def rebuild_command(path) -> str | None:
    """The DVC command that writes `path` again, read off the layout above (None for a file no
    stage writes, such as a memo cell's)."""
    path = Path(path)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            return None
    stage = _producer(path.parts)
    return f"dvc repro -f -s {stage}" if stage else None


def _producer(parts: tuple[str, ...]) -> str | None:
    """The DVC stage (as dvc.yaml names it) whose outputs include the file at `parts`."""
    cell = Path(parts[-1]).stem if parts else ""
    match parts:
        case ("code-deps", _):
            return "code-deps"
        case ("data", "charlm", *_):
            return "charlm-corpus"
        case ("data", task, *_):
            return f"generate-{task}"
        case ("runs", "modular", "cells", *_) | ("runs", "charlm", "cells", *_):
            return None  # memo cells: a stage trains a damaged one again by itself
        case ("runs", "modular", study, _) | ("metrics" | "plots", "modular", _, study, _):
            return f"modular-study@{study}"
        case ("runs", "charlm", "models", _) | ("metrics", "charlm", "runs", _) | (
                "plots", "charlm", "curves" | "val", _):
            return "charlm-train"
        case ("metrics", "charlm", "samples.md") | ("plots", "charlm", "attention", _):
            return "charlm-sample"
        case ("metrics", "charlm", "compute.csv" | "compute.md"):
            return "charlm-compute"
        case ("runs", task, cell, _):
            return f"train-{task}@{cell}"
        case ("plots", task, "eval", _) | ("metrics", task, "runs", _):
            return f"evaluate-{task}@{cell}"
        case ("metrics", "summary.csv" | "summary.json"):
            return "aggregate-tables"
    return None


def done(message: str) -> None:
    """The one-line summary every stage ends with."""
    click.echo(message, err=True)


def code_hash(entries: tuple[str, ...]) -> str:
    """A hash of the named files and directories (*.py) of the installed arithrepro package:
    the code a memoized result depends on."""
    import hashlib

    import arithrepro

    h = hashlib.sha256()
    root = Path(arithrepro.__file__).resolve().parent
    for entry in entries:
        path = root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def fingerprint(*parts) -> str:
    """A short content key of JSON-serializable parts (a memo cell's directory name)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def data_params(params: dict, task: str) -> dict:
    """A grid task's data keys, <task>.data (the params a record's hash covers, beside the model
    and the loop)."""
    return params[task]["data"]


def memo_finished(cell: Path, keys: tuple[str, ...], tables: dict[str, tuple[str, ...]]) -> bool:
    """Whether a memo cell (runs/<task>/cells/<fingerprint>) holds a finished result to reuse:
    record.json, written last, a JSON object with `keys`; each CSV of `tables` readable with its
    columns; model.pt a saved model. A cell that is not is trained again, never trusted: one that
    looked finished loses its record.json (so only a completed retraining marks it again), with
    a warning."""
    from arithrepro.io import read_frame, read_json
    from arithrepro.models.registry import read_saved

    record = cell / "record.json"
    if not record.is_file():
        return False
    try:
        for name in (*tables, "model.pt"):
            if not (cell / name).is_file():
                raise ArtifactError(cell / name, "missing")
        read_json(record, keys)
        for name, columns in tables.items():
            if read_frame(cell / name, columns).empty:
                raise ArtifactError(cell / name, "no rows")
        read_saved(cell / "model.pt")
    except ArtifactError as err:
        click.echo(f"warning: {err}; training the cell again", err=True)
        record.unlink()
        return False
    return True


class Memo:
    """A stage's memo of trained cells, runs/<task>/cells/<fingerprint>: a cell is trained once
    per content (its settings, its seed and the code it runs, `code` under the package), then
    reused by any run, of this stage or another, with the same content. record.json is written
    last, so a cell without one is unfinished (a killed cell resumes from its checkpoint);
    a cell that looks finished is checked whole (`memo_finished`) before it is trusted.

    `outs` maps a cell file to the folder the stage publishes it in under the run's name
    (curves.csv -> plots/.../<run>.csv), and "record" to the folder of the run records."""

    def __init__(self, task: str, code: tuple[str, ...], keys: tuple[str, ...],
                 tables: dict[str, tuple[str, ...]], outs: dict[str, Path]):
        self.root = Path("runs") / task / "cells"
        self.code = code_hash(code)
        self.keys, self.tables, self.outs = keys, tables, outs

    def clear_outputs(self) -> None:
        """Empty the published folders: a run dropped from the params leaves nothing behind."""
        import shutil

        for d in self.outs.values():
            shutil.rmtree(d, ignore_errors=True)

    def cell(self, *content) -> Path:
        return self.root / fingerprint(*content, self.code)

    def finished(self, cell: Path) -> bool:
        return memo_finished(cell, self.keys, self.tables)

    def publish(self, cell: Path, name: str, **changes) -> dict:
        """The cell's record (with `changes`) and files under the run's name; returns the record."""
        from arithrepro.io import copy_file, read_json, write_json

        record = {**read_json(cell / "record.json"), **changes}
        write_json(self.outs["record"] / f"{name}.json", record)
        for file, folder in self.outs.items():
            if file != "record":
                copy_file(cell / file, folder / f"{name}{Path(file).suffix}")
        return record

