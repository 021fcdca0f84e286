"""What every stage shares: the --params/--task/... options and error handling."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from arithrepro.schema import ParamsError
from arithrepro.io import ArtifactError, WriteError, one_line


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


def friendly_errors(f):
    """Expected failures end as one line on stderr and a non-zero exit, without a traceback;
    a damaged file's line names the command that rebuilds it."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        import warnings

        from arithrepro.observers import NonFiniteLoss   # without torch: not every stage needs it

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
        except (FileNotFoundError, NonFiniteLoss, ValueError, WriteError) as err:
            _die(str(err), 1)
        except OSError as err:   # the system refused a read or a write of a named file
            if err.filename is None:
                raise
            _die(f"{err.filename}: {err.strerror or one_line(err)}", 1)
        finally:
            warnings.formatwarning = shown

    return wrapper


def _die(message: str, code: int) -> None:
    message = " ".join(message.splitlines())   # one line, whatever the message quotes
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def rebuild_command(path) -> str | None:
    """The DVC command that writes `path` again, the stage dvc.yaml says writes it (None for a file no
    stage writes)."""
    path = Path(path)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            return None
    from arithrepro.pipeline import producer

    stage = producer(path)
    return f"dvc repro -f -s {stage}" if stage else None


def done(message: str) -> None:
    """The one-line summary every stage ends with."""
    click.echo(message, err=True)


def data_params(params: dict, task: str) -> dict:
    """A grid task's data keys, <task>.data (the params a record's hash covers, beside the model
    and the loop)."""
    return params[task]["data"]
