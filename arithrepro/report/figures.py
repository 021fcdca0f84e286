"""Each task's PNG figures, one line per task: the function that draws them and what it reads
(beside the task's run records) and writes; a task without a line has its tables only. A task
whose tables are its own, not the main table of report/tables.py, names their writer
(`tables`: its rows -> {suffix: text}, each written to metrics/<task>.<suffix>, the markdown's
first; its STAGES.tables names the files).

A renderer takes (the task's rows in the form of metrics/summary.csv, plots/<task>/eval,
data/<task>, plots/<task>) and returns the paths it wrote. render-figures-<task> runs it; dvc.yaml's
outputs and plots come from `writes` (arithrepro/pipeline.py); `shown`, some of the files it
writes, are the ones the results page (docs/results.md) shows first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from arithrepro.report.abacus_looped_figures import render_abacus, render_looped
from arithrepro.report.charlm_figures import render_charlm
from arithrepro.report.expr_figures import render_expr
from arithrepro.report.modular_figures import render_modular
from arithrepro.report.modular_tables import write as modular_tables


@dataclass(frozen=True)
class Figures:
    render: Callable
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    shown: tuple[str, ...] = ()
    tables: Callable | None = None


def _modular(*studies: str) -> tuple[str, ...]:
    return tuple(f"plots/modular/{name}.png" for name in studies)


FIGURES = {
    "expr": Figures(render_expr, ("plots/expr/eval", "data/expr/lengths.csv"),
                    tuple(f"plots/expr/{n}.png" for n in ("accuracy_vs_params", "accuracy_vs_length",
                                                          "val_loss_vs_params", "length_distribution")),
                    ("plots/expr/accuracy_vs_params.png", "plots/expr/accuracy_vs_length.png")),
    "abacus": Figures(render_abacus, ("plots/abacus/eval", "data/abacus/meta.json"),
                      ("plots/abacus/heatmaps", "plots/abacus/ood_vs_recurrences.png"),
                      ("plots/abacus/ood_vs_recurrences.png",)),
    "looped": Figures(render_looped, ("plots/looped/eval", "data/looped/meta.json"),
                      ("plots/looped/accuracy_vs_digits.png",),
                      ("plots/looped/accuracy_vs_digits.png",)),
    "modular": Figures(render_modular,
                       tuple(f"plots/modular/curves/{s}" for s in
                             ("sanity", "data", "orders", "size", "compute", "regularization")),
                       _modular("sanity_curves", "sanity_dynamics", "data_curves", "data_metrics", "orders_curves",
                                "size_curves", "size_metrics", "size_params", "compute_curves",
                                "compute_metrics", "compute_budgets", "regularization_curves",
                                "regularization_metrics"),
                       _modular("sanity_curves", "sanity_dynamics", "data_metrics"),
                       tables=modular_tables),
    "charlm": Figures(render_charlm, ("runs/charlm", "data/charlm/meta.json"),
                      ("plots/charlm/loss_curves.png",),
                      ("plots/charlm/loss_curves.png",)),
}
