"""The figures of the length-generalization tasks: abacus (accuracy grids by recurrence count)
and looped (accuracy vs number of digits). Shared drawing helpers live in figures.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from arithrepro.io import read_json
from arithrepro.report.figures import (STYLE, _pyplot, _read_csv, _require, _save, arch_order,
                                       arch_style)


# --- abacus ---------------------------------------------------------------------------------

def render_abacus(summary: pd.DataFrame, eval_dir: Path, data_dir: Path, out_dir: Path) -> list[Path]:
    """heatmaps/<cell>.png (one panel per inference recurrence count) and ood_vs_recurrences.png."""
    eval_dir, data_dir, out_dir = Path(eval_dir), Path(data_dir), Path(out_dir)
    _require(summary, {"model", "size", "seed", "recurrences"}, "summary")
    meta = read_json(data_dir / "meta.json")
    cells = {f"{r.model}-{r.size}-{int(r.seed)}": r for r in summary.itertuples()}
    grids = {c: _read_csv(eval_dir / f"{c}.csv", {"recurrences", "n1", "n2", "accuracy"}, "evaluate")
             for c in cells}
    trained = {c: int(r.recurrences) for c, r in cells.items()}
    plt = _pyplot()
    written = []
    with plt.rc_context(STYLE):
        for cell, grid in grids.items():
            written.append(_save(plt, _heatmaps(plt, cell, grid, meta, trained[cell]),
                                 out_dir / "heatmaps" / f"{cell}.png"))
        written.append(_save(plt, _ood_vs_recurrences(plt, grids, meta, trained),
                             out_dir / "ood_vs_recurrences.png"))
    return written


def _heatmaps(plt, cell: str, grid: pd.DataFrame, meta: dict, trained: int | None):
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    G, D = meta["grid_max"], meta["max_digits"]
    grid = grid[(grid["n1"] <= G) & (grid["n2"] <= G)]
    recs = sorted(grid["recurrences"].unique())
    cols = len(recs) if len(recs) <= 4 else 3
    rows = -(-len(recs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols + 1.2, 3.3 * rows + 0.9),
                             squeeze=False, sharex=True, sharey=True, layout="constrained")
    image = None
    for ax, r in zip(axes.flat, recs):
        part = grid[grid["recurrences"] == r]
        table = part.pivot(index="n1", columns="n2", values="accuracy").reindex(
            index=range(1, G + 1), columns=range(1, G + 1))
        image = ax.imshow(table.to_numpy(), origin="lower", cmap="viridis", vmin=0, vmax=1,
                          extent=(0.5, G + 0.5, 0.5, G + 0.5), interpolation="nearest")
        ax.add_patch(Rectangle((0.5, 0.5), D, D, fill=False, edgecolor="white", linewidth=1.6,
                               linestyle="--"))
        ood = part[(part["n1"] > D) | (part["n2"] > D)]["accuracy"].mean()
        mark = " (trained)" if r == trained else ""
        ax.set_title(f"{r} recurrence{'s' if r > 1 else ''}{mark}\n"
                     f"grid {100 * part['accuracy'].mean():.0f} %, beyond training {100 * ood:.0f} %",
                     fontsize=9)
        ax.grid(False)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes.flat[len(recs):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("digits of the second operand")
    for ax in axes[:, 0]:
        ax.set_ylabel("digits of the first operand")
    fig.colorbar(image, ax=axes, shrink=0.85, label="exact-match accuracy")
    fig.suptitle(f"abacus {cell}: accuracy by operand lengths "
                 f"(dashed: training range, ≤ {D} digits)", fontsize=11)
    return fig


def _ood_vs_recurrences(plt, grids: dict, meta: dict, trained: dict):
    G, D = meta["grid_max"], meta["max_digits"]
    fig, ax = plt.subplots()
    models = sorted({cell.rsplit("-", 2)[0] for cell in grids})
    frames = []
    for cell, grid in grids.items():
        model, size, seed = cell.rsplit("-", 2)
        g = grid[(grid["n1"] <= G) & (grid["n2"] <= G)]
        ood = g[(g["n1"] > D) | (g["n2"] > D)]
        frames.append(ood.groupby("recurrences", as_index=False)["accuracy"].mean()
                      .assign(model=model, size=size, seed=seed, trained=trained[cell]))
    per_cell = pd.concat(frames)
    sizes = sorted(set(per_cell["size"]))
    for (model, size), part in per_cell.groupby(["model", "size"]):
        mean = part.groupby("recurrences")["accuracy"].agg(["mean", "std", "count"]).reset_index()
        style = arch_style(model, models)
        ls = ["-", "--", ":", "-."][sizes.index(size) % 4]
        n = int(mean["count"].max())
        ax.errorbar(mean["recurrences"], 100 * mean["mean"], yerr=100 * mean["std"].fillna(0),
                    linestyle=ls, capsize=3, label=f"{model} {size} ({n} seed{'s' if n > 1 else ''})",
                    **style)
        ax.axvline(part["trained"].iloc[0], color=style["color"], linestyle=ls, linewidth=0.8,
                   alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(per_cell["recurrences"].unique()))
    ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
    ax.set_ylim(-2, 102)
    ax.set_xlabel("recurrences at inference (log2; thin line: trained count)")
    ax.set_ylabel(f"mean accuracy beyond {D} digits (%)")
    ax.set_title(f"abacus: out-of-distribution accuracy (cells up to {G}×{G}) vs recurrences",
                 fontsize=10)
    ax.legend(loc="best")
    return fig


# --- looped ---------------------------------------------------------------------------------

def render_looped(summary: pd.DataFrame, eval_dir: Path, data_dir: Path, out_dir: Path) -> list[Path]:
    """accuracy_vs_digits.png: exact match and per-digit accuracy, standard vs looped."""
    eval_dir, data_dir, out_dir = Path(eval_dir), Path(data_dir), Path(out_dir)
    _require(summary, {"model", "size", "seed"}, "summary")
    meta = read_json(data_dir / "meta.json")
    frames = [_read_csv(eval_dir / f"{r.model}-{r.size}-{int(r.seed)}.csv",
                        {"digits", "accuracy", "digit_acc"}, "evaluate").assign(model=r.model, size=r.size)
              for r in summary.itertuples()]
    per = pd.concat(frames).groupby(["model", "size", "digits"], as_index=False)[
        ["accuracy", "digit_acc"]].mean()
    models = sorted(set(per["model"]))
    plt = _pyplot()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        for model in arch_order(models):
            for size, part in per[per["model"] == model].groupby("size"):
                style = arch_style(model, models)
                ax.plot(part["digits"], 100 * part["accuracy"], label=f"{model}: exact match",
                        **style)
                ax.plot(part["digits"], 100 * part["digit_acc"], linestyle="--", alpha=0.7,
                        label=f"{model}: per digit", **{**style, "marker": None})
        L = meta["train_digits"]
        ax.axvline(L, color="0.3", linestyle=":", linewidth=1.4)
        ax.text(L, 0.5, f" trained on {L} digits", transform=ax.get_xaxis_transform(),
                fontsize=8, color="0.3", rotation=90, va="center", ha="right")
        ax.set_ylim(-2, 102)
        ax.set_xlabel(f"number of digits ({meta['variant']} operands)")
        ax.set_ylabel("accuracy (%)")
        seeds = summary.groupby("model")["seed"].nunique().max()
        ax.set_title(f"looped: accuracy vs length, standard vs looped "
                     f"({'mean over ' + str(seeds) + ' seeds' if seeds > 1 else 'one seed'})")
        ax.legend(loc="best")
        return [_save(plt, fig, out_dir / "accuracy_vs_digits.png")]
