"""The modular studies' figures: curves over steps (coloured by the swept variable, with a colour
bar) and best metrics against it, one pair per study; drawn from metrics/summary.csv and
plots/modular/curves/<study>/<cell>.csv.

Curves are the mean over seeds at each evaluated step; training solid, validation dashed. The
sanity curves also shade the lowest to the highest seed: with two seeds a std says little.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from arithrepro.report.plotting import (STYLE, pyplot, read_csv, save, seed_note,
                                       seeds_per_cell, arch_style, display_name, seed_spread,
                                       shade_spread)
from arithrepro.report.modular_tables import budgets_of, study_rows

SPLIT_LINE = {"train": "-", "val": "--"}
LABEL = {"r_train": "training fraction r_train", "d_model": "width d", "layers": "layers L",
         "batch_size": "batch size B", "weight_decay": "weight decay"}


def _name(model: str) -> str:
    return display_name(model.split("-")[0])


def _style(model: str) -> dict:
    return arch_style(model.split("-")[0], ["gpt", "lstm"])


def _runs(rows: pd.DataFrame, curve_dir: Path) -> dict:
    """{(model, label): its seeds' curves one below the other, with a seed column}."""
    out = {}
    for (model, label), g in rows.groupby(["model", "size"], sort=False):
        names = [f"{model}-{label}-{int(seed)}" for seed in g["seed"]]
        frames = [read_csv(curve_dir / f"{n}.csv",
                           {"step", "train_loss", "val_loss", "train_acc", "val_acc"},
                           f"train --task modular {n}").assign(seed=int(n.rsplit("-", 1)[1]))
                  for n in names]
        out[(model, label)] = pd.concat(frames, ignore_index=True)
    return out


def _curves(rows: pd.DataFrame, curve_dir: Path) -> dict:
    """{(model, label): mean-over-seeds curve}."""
    return {key: runs.drop(columns="seed").groupby("step", as_index=False).mean()
            for key, runs in _runs(rows, curve_dir).items()}


def _note(rows: pd.DataFrame, what: str = "mean") -> str:
    """E.g. 'mean over 2 seeds', from the seeds of each (model, label) drawn."""
    return seed_note(seeds_per_cell(rows), what)


def _colormap(values: list[float], log2: bool):
    import matplotlib as mpl

    vals = [math.log2(v) if log2 else v for v in values]
    lo, hi = min(vals), max(vals)
    norm = mpl.colors.Normalize(lo - 0.5 if lo == hi else lo, hi + 0.5 if lo == hi else hi)
    cmap = mpl.colormaps["viridis"]
    return (lambda v: cmap(norm(math.log2(v) if log2 else v))), mpl.cm.ScalarMappable(norm, cmap)


def _colorbar(fig, axes, mappable, key: str, values: list[float], log2: bool) -> None:
    bar = fig.colorbar(mappable, ax=axes, shrink=0.9)
    ticks = sorted(set(values))
    bar.set_ticks([math.log2(v) for v in ticks] if log2 else ticks)
    bar.set_ticklabels([f"{v:g}" for v in ticks])
    bar.set_label(LABEL.get(key, key) + (" (log2 scale)" if log2 else ""))


def _split_legend(ax) -> None:
    from matplotlib.lines import Line2D

    ax.legend(handles=[Line2D([], [], color="0.3", linestyle=SPLIT_LINE[s], label=s)
                       for s in ("train", "val")], loc="best")


def _loss_axes(ax) -> None:
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (right-hand side, per sample)")


def _acc_axes(ax) -> None:
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy (whole right-hand side)")
    ax.set_ylim(-0.03, 1.03)


def sanity(plt, rows: pd.DataFrame, curve_dir: Path):
    fig, (lo, ac) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (model, _), runs in _runs(rows, curve_dir).items():
        st = _style(model)
        for split in ("train", "val"):
            kw = dict(color=st["color"], linestyle=SPLIT_LINE[split], label=f"{_name(model)} {split}")
            for ax, metric in ((lo, f"{split}_loss"), (ac, f"{split}_acc")):
                spread = seed_spread(runs, "step", metric, band="range")
                ax.plot(spread["step"], spread["mean"], **kw)
                shade_spread(ax, spread, "step", st["color"])
    _loss_axes(lo)
    _acc_axes(ac)
    ac.legend(loc="lower right")
    fig.suptitle(f"modular sanity: loss and accuracy over steps "
                 f"({_note(rows, 'mean, shaded min–max')}), p = {int(rows['p'].iloc[0])}, "
                 f"r_train = {rows['r_train'].iloc[0]:g}")
    return fig


def swept_curves(plt, rows: pd.DataFrame, curve_dir: Path, key: str, log2: bool, study: str,
                 norm: bool = False):
    """A row per model: loss, accuracy (and parameter norm), one colour per swept value."""
    curves = _curves(rows, curve_dir)
    models = list(dict.fromkeys(rows["model"]))
    values = sorted(rows[key].unique())
    colour, mappable = _colormap(values, log2)
    cols = 3 if norm else 2
    fig, axes = plt.subplots(len(models), cols, figsize=(5 * cols + 1.5, 3.6 * len(models)),
                             squeeze=False)
    value_of = {(m, lab): float(g[key].iloc[0]) for (m, lab), g in rows.groupby(["model", "size"])}
    for i, model in enumerate(models):
        lo, ac = axes[i][0], axes[i][1]
        for (m, label), c in curves.items():
            if m != model:
                continue
            col = colour(value_of[(m, label)])
            for split in ("train", "val"):
                lo.plot(c["step"], c[f"{split}_loss"], color=col, linestyle=SPLIT_LINE[split], lw=1.4)
                ac.plot(c["step"], c[f"{split}_acc"], color=col, linestyle=SPLIT_LINE[split], lw=1.4)
            if norm:
                axes[i][2].plot(c["step"], c["param_norm"], color=col, lw=1.6)
        _loss_axes(lo)
        _acc_axes(ac)
        lo.set_title(f"{_name(model)}: loss")
        ac.set_title(f"{_name(model)}: accuracy")
        _split_legend(ac)
        if norm:
            axes[i][2].set_title(f"{_name(model)}: parameter norm ‖θ‖₂")
            axes[i][2].set_xlabel("step")
            axes[i][2].set_ylabel("‖θ‖₂")
    _colorbar(fig, axes, mappable, key, values, log2)
    fig.suptitle(f"modular {study}: curves coloured by {LABEL.get(key, key)} ({_note(rows)})")
    return fig


def _seed_mean(rows: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    """`columns` averaged over seeds per `by`. Only those: a mean over the whole summary's
    hundreds of columns comes back in as many pieces, which pandas then warns about."""
    return rows[[*by, *columns]].groupby(by, as_index=False).mean()


def metrics_vs(plt, rows: pd.DataFrame, key: str, log2: bool, study: str):
    """Best loss, best accuracy and the step reaching the best accuracy against the swept key,
    a line per model and split."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    mean = _seed_mean(rows, ["model", key], [f"{split}_{m}" for split in ("train", "val")
                                              for m in ("loss", "acc", "acc_step")])
    for model, g in mean.groupby("model", sort=False):
        g = g.sort_values(key)
        for split, marker in (("train", "o"), ("val", "s")):
            kw = dict(color=_style(model)["color"], marker=marker, ms=4,
                      linestyle=SPLIT_LINE[split], label=f"{_name(model)} {split}")
            axes[0].plot(g[key], g[f"{split}_loss"], **kw)
            axes[1].plot(g[key], g[f"{split}_acc"], **kw)
            axes[2].plot(g[key], g[f"{split}_acc_step"], **kw)
    for ax, ylabel in zip(axes, ("best loss", "best accuracy", "first step at best accuracy")):
        ax.set_xlabel(LABEL.get(key, key))
        ax.set_ylabel(ylabel)
        if log2:
            ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(rows[key].unique()))
        ax.get_xaxis().set_major_formatter(_plain_ticks())
    axes[0].set_yscale("log")
    axes[1].set_ylim(-0.03, 1.03)
    axes[1].legend(fontsize=7, loc="best")
    fig.suptitle(f"modular {study}: metrics against {LABEL.get(key, key)} ({_note(rows)})")
    return fig


def _plain_ticks():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _: f"{x:g}")


def orders(plt, rows: pd.DataFrame, curve_dir: Path):
    curves = _curves(rows, curve_dir)
    orders_ = sorted(int(c[1:].split("_")[0]) for c in next(iter(curves.values())).columns
                     if c.startswith("o") and c.endswith("_val_acc"))
    fig, axes = plt.subplots(len(curves), 2, figsize=(11, 3.6 * len(curves)), squeeze=False)
    shades = {k: c for k, c in zip(orders_, ("#d95f02", "#7570b3", "#e7298a"))}
    for i, ((model, _), c) in enumerate(curves.items()):
        lo, ac = axes[i]
        for split in ("train", "val"):
            kw = dict(color="0.15", linestyle=SPLIT_LINE[split], lw=2)
            lo.plot(c["step"], c[f"{split}_loss"], label=f"all orders, {split}", **kw)
            ac.plot(c["step"], c[f"{split}_acc"], label=f"all orders, {split}", **kw)
            for k in orders_:
                kw = dict(color=shades[k], linestyle=SPLIT_LINE[split], lw=1.3)
                lo.plot(c["step"], c[f"o{k}_{split}_loss"], label=f"order {k}, {split}", **kw)
                ac.plot(c["step"], c[f"o{k}_{split}_acc"], label=f"order {k}, {split}", **kw)
        _loss_axes(lo)
        _acc_axes(ac)
        lo.set_title(f"{_name(model)}: loss")
        ac.set_title(f"{_name(model)}: accuracy")
        ac.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"modular orders: p = {int(rows['p'].iloc[0])}, orders "
                 f"{' and '.join(map(str, orders_))} mixed, overall and per order ({_note(rows)})")
    return fig


def size_curves(plt, rows: pd.DataFrame, curve_dir: Path):
    """A row per model, a column per L: accuracy curves coloured by d (log2)."""
    curves = _curves(rows, curve_dir)
    models = list(dict.fromkeys(rows["model"]))
    Ls = sorted(rows["layers"].unique())
    ds = sorted(rows["d_model"].unique())
    colour, mappable = _colormap(ds, True)
    fig, axes = plt.subplots(len(models), len(Ls), figsize=(4.6 * len(Ls) + 1.5, 3.6 * len(models)),
                             squeeze=False, sharey=True)
    arch = {(m, lab): g.iloc[0] for (m, lab), g in rows.groupby(["model", "size"])}
    for (m, label), c in curves.items():
        r = arch[(m, label)]
        ax = axes[models.index(m)][Ls.index(r["layers"])]
        for split in ("train", "val"):
            ax.plot(c["step"], c[f"{split}_acc"], color=colour(r["d_model"]),
                    linestyle=SPLIT_LINE[split], lw=1.4)
    for i, m in enumerate(models):
        for j, L in enumerate(Ls):
            ax = axes[i][j]
            _acc_axes(ax)
            ax.set_title(f"{_name(m)}, L = {int(L)}")
        _split_legend(axes[i][0])
    _colorbar(fig, axes, mappable, "d_model", ds, True)
    fig.suptitle(f"modular size: accuracy over steps per depth, coloured by width ({_note(rows)})")
    return fig


def size_metrics(plt, rows: pd.DataFrame):
    """Best validation accuracy and the step reaching it against d (a line per L), against L (a
    line per d) and against P."""
    mean = _seed_mean(rows, ["model", "layers", "d_model"], ["val_acc", "val_acc_step", "params"])
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.6))
    markers = ["o", "s", "^", "D", "v"]
    for model, g in mean.groupby("model", sort=False):
        st = _style(model)
        for row, metric in enumerate(("val_acc", "val_acc_step")):
            for j, (L, sub) in enumerate(g.groupby("layers")):
                sub = sub.sort_values("d_model")
                axes[row][0].plot(sub["d_model"], sub[metric], color=st["color"],
                                  marker=markers[j % 5], label=f"{_name(model)}, L = {int(L)}")
            for j, (d, sub) in enumerate(g.groupby("d_model")):
                sub = sub.sort_values("layers")
                axes[row][1].plot(sub["layers"], sub[metric], color=st["color"],
                                  marker=markers[j % 5], label=f"{_name(model)}, d = {int(d)}")
            axes[row][2].scatter(g["params"], g[metric], color=st["color"], label=_name(model))
    for row, ylabel in enumerate(("best validation accuracy", "first step at best val. accuracy")):
        axes[row][0].set_xscale("log", base=2)
        axes[row][0].set_xticks(sorted(rows["d_model"].unique()))
        axes[row][0].get_xaxis().set_major_formatter(_plain_ticks())
        axes[row][1].set_xticks(sorted(rows["layers"].unique()))
        axes[row][2].set_xscale("log")
        for ax, xlabel in zip(axes[row], ("width d", "layers L", "parameters P (no embedding)")):
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
    for ax in axes[0]:
        ax.set_ylim(-0.03, 1.03)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"modular size: metrics against width, depth and parameter count ({_note(rows)})")
    return fig


def compute_budgets(plt, rows: pd.DataFrame, budgets: list[float]):
    """Best validation accuracy within the first alpha*T steps against B, a line per alpha."""
    models = list(dict.fromkeys(rows["model"]))
    colour, mappable = _colormap(budgets, False)
    fig, axes = plt.subplots(1, len(models), figsize=(5.4 * len(models) + 1.5, 4.2), squeeze=False)
    mean = _seed_mean(rows, ["model", "batch_size"], [f"a{a:g}_val_acc" for a in budgets])
    for ax, model in zip(axes[0], models):
        g = mean[mean["model"] == model].sort_values("batch_size")
        for a in budgets:
            ax.plot(g["batch_size"], g[f"a{a:g}_val_acc"], color=colour(a), marker="o", ms=4)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(rows["batch_size"].unique()))
        ax.get_xaxis().set_major_formatter(_plain_ticks())
        ax.set_xlabel("batch size B")
        ax.set_ylabel("best validation accuracy within α·T steps")
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(_name(model))
    _colorbar(fig, axes, mappable, "budget α", budgets, False)
    fig.suptitle(f"modular compute: validation accuracy against batch size per budget α "
                 f"(T = {int(rows['steps'].iloc[0])}, {_note(rows)})")
    return fig


def render_modular(summary: pd.DataFrame, eval_dir: Path, data_dir: Path, out_dir: Path) -> list[Path]:
    """plots/modular/<study>_curves.png and <study>_metrics.png for every study with records,
    plus compute_budgets.png."""
    out_dir = Path(out_dir)
    curve_dir = out_dir / "curves"
    plt = pyplot()
    written = []
    with plt.rc_context(STYLE):
        def keep(fig, name):
            written.append(save(plt, fig, out_dir / f"{name}.png"))

        rows = study_rows(summary, "sanity")
        if len(rows):
            keep(sanity(plt, rows, curve_dir / "sanity"), "sanity_curves")
        for study, key, log2 in (("data", "r_train", False), ("compute", "batch_size", True),
                                 ("regularization", "weight_decay", False)):
            rows = study_rows(summary, study)
            if len(rows):
                keep(swept_curves(plt, rows, curve_dir / study, key, log2, study,
                                  norm=study == "regularization"), f"{study}_curves")
                keep(metrics_vs(plt, rows, key, log2, study), f"{study}_metrics")
        rows = study_rows(summary, "compute")
        budgets = budgets_of(rows)
        if len(rows) and budgets:
            keep(compute_budgets(plt, rows, budgets), "compute_budgets")
        rows = study_rows(summary, "orders")
        if len(rows):
            keep(orders(plt, rows, curve_dir / "orders"), "orders_curves")
        rows = study_rows(summary, "size")
        if len(rows):
            keep(size_curves(plt, rows, curve_dir / "size"), "size_curves")
            keep(size_metrics(plt, rows), "size_metrics")
    return written
