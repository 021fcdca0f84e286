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
    stage writes)."""
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
        case ("runs", "modular", study, name, *_):
            return _modular_stage(study, name)
        case ("metrics", "modular", "runs", study, _) | ("plots", "modular", "curves", study, _):
            return _modular_stage(study, cell)
        case ("runs", "charlm", name, *_):
            return f"train-charlm@{name}"
        case ("metrics", "charlm", "runs", _):
            return f"train-charlm@{cell}"
        case ("metrics", "charlm", "samples.md") | ("plots", "charlm", "attention", _):
            return "charlm-sample"
        case ("metrics", "charlm", "compute.csv" | "compute.md"):
            return "charlm-compute"
        case ("runs", task, name, *_):
            return f"train-{task}@{name}"
        case ("plots", task, "eval", _) | ("metrics", task, "runs", _):
            return f"evaluate-{task}@{cell}"
        case ("metrics", "summary.csv" | "summary.json"):
            return "aggregate-tables"
    return None


def _modular_stage(study: str, name: str) -> str | None:
    """train-modular-<study>@<DVC's key> of a run named <model>-<study>[.<swept values>]-<seed>:
    DVC joins the model, the swept values and the seed with '-' (the values are numbers, each
    after its key's letters in the name: data.r0.3, size.L2d128)."""
    import re

    hit = re.fullmatch(rf"(.+)-{re.escape(study)}(\.[^-].*?)?-(\d+)", name)
    if not hit:
        return None
    values = re.findall(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", hit[2] or "")
    return f"train-modular-{study}@" + "-".join([hit[1], *values, hit[3]])


def done(message: str) -> None:
    """The one-line summary every stage ends with."""
    click.echo(message, err=True)


def data_params(params: dict, task: str) -> dict:
    """A grid task's data keys, <task>.data (the params a record's hash covers, beside the model
    and the loop)."""
    return params[task]["data"]
