"""What every stage shares: the file layout, the --params/--task/... options and error handling."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from arithrepro.config import ParamsError
from arithrepro.device import placement  # noqa: F401 - the stages' one way to pick device and precision


class paths:
    """The pipeline's file layout (relative to the repository root, where DVC runs stages)."""

    @staticmethod
    def data(task: str) -> Path:
        return Path("data") / task

    @staticmethod
    def run(task: str, cell: str) -> Path:
        return Path("runs") / task / cell

    @staticmethod
    def curves(task: str, cell: str) -> Path:
        return Path("plots") / task / "curves" / f"{cell}.csv"

    @staticmethod
    def val_curves(task: str, cell: str) -> Path:
        return Path("plots") / task / "val" / f"{cell}.csv"

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


params_option = click.option(
    "--params", "params_path", default="params.yaml", show_default=True,
    type=click.Path(dir_okay=False), help="The params file (validated before any work).")


def cell_options(f):
    """--task --model --size --seed: one cell of the grid."""
    for opt in reversed([
        click.option("--task", required=True, help="Task name: expr, abacus or looped."),
        click.option("--model", required=True, help="Model name, one of <task>.models."),
        click.option("--size", required=True, help="Size name, one of models.<model>.sizes."),
        click.option("--seed", required=True, type=int, help="Seed of the run."),
    ]):
        f = opt(f)
    return f


def friendly_errors(f):
    """Expected failures end as one line on stderr and a non-zero exit, without a traceback."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        from arithrepro.train import NonFiniteLoss

        try:
            return f(*args, **kwargs)
        except ParamsError as err:
            _die(f"params: {err}", 2)
        except (FileNotFoundError, NonFiniteLoss, ValueError) as err:
            _die(str(err), 1)

    return wrapper


def _die(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


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
