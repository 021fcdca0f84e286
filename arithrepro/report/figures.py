"""Each task's PNG figures: figures() maps a task to the function that draws them, from its rows
of metrics/summary.csv and its per-cell evaluation files; a new task adds its own line."""

from __future__ import annotations

from arithrepro.report.abacus_looped_figures import render_abacus, render_looped
from arithrepro.report.charlm_figures import render_charlm
from arithrepro.report.expr_figures import render_expr
from arithrepro.report.modular_figures import render_modular


def figures() -> dict:
    """{task: renderer}; each renderer takes (summary rows of the task, plots/<task>/eval,
    data/<task>, plots/<task>) and returns the paths it wrote."""
    return {"expr": render_expr, "abacus": render_abacus, "looped": render_looped,
            "modular": render_modular, "charlm": render_charlm}
