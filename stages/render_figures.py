"""render-figures: the PNG figures of every task from the aggregated tables."""

from __future__ import annotations

import click

from arithrepro.stages.common import done, friendly_errors, params_option, paths


@click.command("render-figures")
@params_option
@friendly_errors
def render_figures(params_path: str) -> None:
    """Draw each task's figures.

    Reads metrics/summary.csv, plots/<task>/eval/*.csv and data/<task>/ (expr: lengths.csv;
    abacus, looped: meta.json); params.yaml is only validated. Writes plots/<task>/*.png
    (abacus: also plots/abacus/heatmaps/<cell>.png).
    """
    from arithrepro import config
    from arithrepro.io import read_frame
    from arithrepro.report.figures import figures

    config.load(params_path)
    src = paths.metrics / "summary.csv"
    if not src.is_file():
        raise FileNotFoundError(f"{src}: missing; run `arithrepro aggregate-tables` first")
    summary = read_frame(src, ("task",))
    written = []
    for task, render in figures().items():
        rows = summary[summary["task"] == task]
        if len(rows):
            written += render(rows, paths.evaluation(task), paths.data(task), paths.plots / task)
    done(f"render-figures: {len(written)} figures -> " + ", ".join(str(p) for p in written))
