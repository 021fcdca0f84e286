"""The figures of the length-generalization tasks: abacus (accuracy grids by recurrence count)
and looped (accuracy vs number of digits). Shared drawing helpers live in figures.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from arithrepro.io import read_json
from arithrepro.report.plotting import (STYLE, arch_order, arch_style, pyplot, read_csv,
                                       require, save, seed_note, seed_spread, seeds_per_cell,
                                       shade_spread)
from arithrepro.runs import CONFIG_KEY


# --- abacus ---------------------------------------------------------------------------------

def render_abacus(summary: pd.DataFrame, eval_dir: Path, data_dir: Path, out_dir: Path) -> list[Path]:
    """heatmaps/<cell>.png (one panel per inference recurrence count; with several seeds also
    heatmaps/<model>-<size>-mean.png, their mean) and ood_vs_recurrences.png."""
    eval_dir, data_dir, out_dir = Path(eval_dir), Path(data_dir), Path(out_dir)
    require(summary, {"model", "size", "seed", "recurrences"}, "summary")
    meta = read_json(data_dir / "meta.json", ("grid_max", "max_digits"))
    cells = {f"{r.model}-{r.size}-{int(r.seed)}": r for r in summary.itertuples()}
    grids = {c: read_csv(eval_dir / f"{c}.csv", {"recurrences", "n1", "n2", "accuracy"}, "evaluate")
             for c in cells}
    trained = {c: int(r.recurrences) for c, r in cells.items()}
    plt = pyplot()
    written = []
    with plt.rc_context(STYLE):
        for cell, grid in grids.items():
            written.append(save(plt, _heatmaps(plt, cell, grid, meta, trained[cell]),
                                 out_dir / "heatmaps" / f"{cell}.png"))
        # One seed's grid can be a lucky or unlucky run; the mean is what to compare across cells.
        for (model, size), runs in summary.groupby(CONFIG_KEY):
            seeds = sorted(int(s) for s in runs["seed"])
            if len(seeds) > 1:
                mean = mean_grid([grids[f"{model}-{size}-{s}"] for s in seeds])
                title = f"{model}-{size} (mean over {len(seeds)} seeds)"
                written.append(save(plt, _heatmaps(plt, title, mean, meta,
                                                    int(runs["recurrences"].iloc[0])),
                                     out_dir / "heatmaps" / f"{model}-{size}-mean.png"))
        written.append(save(plt, _ood_vs_recurrences(plt, grids, meta, trained),
                             out_dir / "ood_vs_recurrences.png"))
    return written


def mean_grid(grids: list[pd.DataFrame]) -> pd.DataFrame:
    """Per (recurrences, n1, n2): the mean accuracy over the seeds' grids."""
    return (pd.concat(grids).groupby(["recurrences", "n1", "n2"], as_index=False)["accuracy"]
            .mean())


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
    """Accuracy against the inference recurrence count, two panels: over the whole evaluation
    grid (what the ledger's tests read) and over its cells beyond the training length."""
    G, D = meta["grid_max"], meta["max_digits"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    frames = []
    for cell, grid in grids.items():
        model, size, seed = cell.rsplit("-", 2)
        g = grid[(grid["n1"] <= G) & (grid["n2"] <= G)]
        ood = g[(g["n1"] > D) | (g["n2"] > D)]
        for part, cells in (("grid", g), ("beyond", ood)):
            frames.append(cells.groupby("recurrences", as_index=False)["accuracy"].mean()
                          .assign(model=model, size=size, seed=seed, trained=trained[cell],
                                  part=part))
    per_cell = pd.concat(frames)
    sizes = sorted(set(per_cell["size"]))
    structures = list(per_cell.groupby(CONFIG_KEY).groups)
    for ax, part, title in ((axes[0], "grid", f"the whole grid, cells up to {G}×{G}"),
                            (axes[1], "beyond", f"cells beyond {D} digits (up to {G}×{G})")):
        for model, size in structures:
            rows = per_cell[(per_cell["model"] == model) & (per_cell["size"] == size)
                            & (per_cell["part"] == part)]
            spread = seed_spread(rows, "recurrences", "accuracy")
            # the model's colour, as in every figure; its structures apart by line and marker
            color = arch_style(model, [m for m, _ in structures])["color"]
            ls = ["-", "--", ":", "-."][sizes.index(size) % 4]
            marker = ["D", "s", "o", "^"][sizes.index(size) % 4]
            n = int(spread["n"].max())
            # every seed as a faint line, the mean over them bold: no band to clip at 100 %
            for _, one in rows.groupby("seed"):
                one = one.sort_values("recurrences")
                ax.plot(one["recurrences"], 100 * one["accuracy"], linestyle=ls, linewidth=0.8,
                        marker=".", markersize=5, alpha=0.4, color=color)
            single = len(spread) == 1   # one recurrence count: a point, shown as one
            ax.plot(spread["recurrences"], 100 * spread["mean"], linestyle="none" if single
                    else ls, linewidth=2, marker=marker, markersize=6, color=color,
                    label=f"{model} {size}: " + (f"mean of {n} seeds" if n > 1 else "one seed"))
            # the trained count: a star on the mean line
            at = spread[spread["recurrences"] == rows["trained"].iloc[0]]
            if len(at):
                ax.plot(at["recurrences"], 100 * at["mean"], marker="*", markersize=14,
                        color=color, linestyle="none")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(per_cell["recurrences"].unique()))
        ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
        ax.set_ylim(-2, 102)
        ax.set_xlabel("recurrences at inference (log2; ★ the trained count)")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("mean accuracy, exact match (%)")
    axes[0].legend(loc="best")
    fig.suptitle("abacus: accuracy vs recurrences at inference (faint: each seed; bold: their "
                 "mean)")
    return fig


# --- looped ---------------------------------------------------------------------------------

def render_looped(summary: pd.DataFrame, eval_dir: Path, data_dir: Path, out_dir: Path) -> list[Path]:
    """accuracy_vs_digits.png: exact match and per-digit accuracy, standard vs looped."""
    eval_dir, data_dir, out_dir = Path(eval_dir), Path(data_dir), Path(out_dir)
    require(summary, {"model", "size", "seed"}, "summary")
    meta = read_json(data_dir / "meta.json", ("train_digits", "variant"))
    frames = [read_csv(eval_dir / f"{r.model}-{r.size}-{int(r.seed)}.csv",
                        {"digits", "accuracy", "digit_acc"}, "evaluate").assign(model=r.model, size=r.size)
              for r in summary.itertuples()]
    runs = pd.concat(frames)  # one row per seed and number of digits
    models = sorted(set(runs["model"]))
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        for model in arch_order(models):
            style = arch_style(model, models)
            for size, part in runs[runs["model"] == model].groupby("size"):
                exact = seed_spread(part, "digits", "accuracy")
                digit = seed_spread(part, "digits", "digit_acc")
                ax.plot(exact["digits"], 100 * exact["mean"], label=f"{model}: exact match",
                        **style)
                ax.plot(digit["digits"], 100 * digit["mean"], linestyle="--", alpha=0.7,
                        label=f"{model}: per digit", **{**style, "marker": None})
                for spread in (exact, digit):
                    shade_spread(ax, spread, "digits", style["color"], scale=100, bounds=(0, 1))
        L = meta["train_digits"]
        ax.axvline(L, color="0.3", linestyle=":", linewidth=1.4)
        ax.text(L, 0.5, f" trained on {L} digits", transform=ax.get_xaxis_transform(),
                fontsize=8, color="0.3", rotation=90, va="center", ha="right")
        ax.set_ylim(-2, 102)
        ax.set_xlabel(f"number of digits ({meta['variant']} operands)")
        ax.set_xticks(sorted(int(d) for d in runs["digits"].unique()))   # the lengths measured
        ax.set_ylabel("accuracy (%)")
        note = seed_note(seeds_per_cell(summary), "mean ± std")
        ax.set_title(f"looped: accuracy vs length, standard vs looped ({note})")
        ax.legend(loc="best")
        return [save(plt, fig, out_dir / "accuracy_vs_digits.png")]
