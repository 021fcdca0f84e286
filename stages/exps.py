"""exps: the experiments side by side, only what differs and the headline metrics."""

from __future__ import annotations

import click

from arithrepro.stages.common import TaskName, friendly_errors


@click.command("exps", context_settings={"ignore_unknown_options": True})
@click.option("--task", type=TaskName(check=True), default=None,
              help="Only this task's params and headline metrics.")
@click.option("--width", type=int, default=200, show_default=True, help="Widest line.")
@click.argument("dvc_args", nargs=-1, type=click.UNPROCESSED)
@friendly_errors
def exps(task: str | None, width: int, dvc_args: tuple[str, ...]) -> None:
    """Compare experiments: a column per experiment (the workspace, each commit, each of its
    experiments), a row per params key that differs between them, then the headline metrics
    (metrics/headline.json: mean±std over seeds per model and size).

    Any other arguments go to `dvc exp show` (for example `-A`, `-n 3`, `--rev main`). Reads
    nothing of the pipeline's files itself; not a stage.
    """
    import json
    import subprocess
    import sys

    from arithrepro.exps import experiments, n_params, render, rows

    proc = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json", *dvc_args],
                          capture_output=True, text=True)
    if proc.returncode:
        raise ValueError("dvc exp show: " + (proc.stderr.strip().splitlines() or ["failed"])[-1])
    out = proc.stdout
    start = min((i for i in (out.find("["), out.find("{")) if i >= 0), default=-1)
    if start < 0:
        raise ValueError("dvc exp show --json: no JSON in its output")
    shown = json.loads(out[start:])
    found = experiments(shown if isinstance(shown, list) else [shown])
    table = rows(found, task)
    click.echo(render(found, table, width, n_params(table, found)))
