"""The modular studies' figures: curves over steps (coloured by the swept variable, with a colour
bar) and best metrics against it, one pair per study; drawn from metrics/summary.csv and
plots/modular/curves/<study>/<cell>.csv.

Curves are the mean over seeds at each evaluated step; the sweep curves (not the orders ones)
have a band of ± 1 sample std over the seeds where a cell has two or more (the source's
"average and a standard deviation around it"; the tables' std). On the loss panels' log scale
the mean and the std are those of log L (a geometric mean, the band ×/÷ one geometric std): an
arithmetic band there dips below zero, drawn as solid columns down the axis. The sanity study,
whose seeds collapse at different steps, draws each seed and their median instead. Training
solid, validation dashed; accuracy in %, as the tables give it, and the loss in nats per answer
token. The metrics are the source's eight per run: best loss L and accuracy A (train and val)
and the first step t_f reaching each, the mean over seeds; a t_f at the step budget (the loss
still falling when training stopped) lies on the budget's dotted line.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from arithrepro.report.plotting import (STYLE, pyplot, read_csv, save, seed_note,
                                       seeds_per_cell, arch_style, display_name, shade_spread)
from arithrepro.report.modular_tables import budgets_of, study_rows
from arithrepro.runs import CONFIG_KEY

SPLIT_LINE = {"train": "-", "val": "--"}
SPLITS = ("train", "val")
LABEL = {"r_train": "training fraction r_train", "d_model": "width d", "layers": "layers L",
         "batch_size": "batch size B", "weight_decay": "weight decay"}
# The source's per-run quantities, each for train and val: the record's column is
# <split>_<quantity> (and a<alpha>_<split>_<quantity> within the first alpha*T steps).
QUANTITY = {"loss": "lowest loss, L (nats per answer token, log scale)",
            "acc": "highest accuracy, A (%)",
            "loss_step": "step of the lowest loss, t_f(L)",
            "acc_step": "first step at the highest accuracy, t_f(A)"}
MARKERS = ["o", "s", "^", "D", "v"]


def _pct(metric: str) -> float:
    """How a column is drawn: accuracies in %, as the tables give them."""
    return 100.0 if metric == "acc" or metric.endswith("_acc") else 1.0


def _name(model: str) -> str:
    return display_name(model.split("-")[0])


def _style(model: str) -> dict:
    return arch_style(model.split("-")[0], ["gpt", "lstm"])


def _runs(rows: pd.DataFrame, curve_dir: Path) -> dict:
    """{(model, label): its seeds' curves one below the other, with a seed column}."""
    out = {}
    for (model, label), g in rows.groupby(CONFIG_KEY, sort=False):
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


def _spread(runs: pd.DataFrame, metric: str, log: bool = False) -> pd.DataFrame:
    """Per step: n, mean, and low / high = mean ∓ the sample std over the seeds (ddof 1, as the
    tables); with `log`, of log10 of the metric, returned in the metric's units."""
    values = runs.dropna(subset=[metric])
    if log:
        values = values[values[metric] > 0].assign(**{metric: lambda d: np.log10(d[metric])})
    g = values.groupby("step")[metric]
    out = g.agg(["count", "mean"]).rename(columns={"count": "n"})
    std = g.std(ddof=1).fillna(0)
    out["low"], out["high"] = out["mean"] - std, out["mean"] + std
    if log:
        out[["mean", "low", "high"]] = 10.0 ** out[["mean", "low", "high"]]
    return out.reset_index()


def _band_line(ax, runs: pd.DataFrame, metric: str, **kw) -> None:
    """The seeds' mean of `metric` over steps, its ± std band behind it (none for one seed)."""
    spread = _spread(runs, metric, log=metric.endswith("_loss"))   # the loss axes are log
    ax.plot(spread["step"], _pct(metric) * spread["mean"], **kw)
    # clipped to what the metric can take: no band past 100 % accuracy or below zero loss
    bounds = (0, 1) if metric.endswith("_acc") else (0, math.inf)
    shade_spread(ax, spread, "step", kw["color"], scale=_pct(metric), bounds=bounds)


def _banded(rows: pd.DataFrame) -> bool:
    return bool(seeds_per_cell(rows).max() > 1)


def _note(rows: pd.DataFrame, band: bool = False) -> str:
    """E.g. 'mean over 2 seeds' (', band ± 1 std' with band), from the seeds of each
    (model, label) drawn."""
    note = seed_note(seeds_per_cell(rows), "mean")
    return note + (", band ± 1 std, of log L for the loss" if band and _banded(rows) else "")


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


def _band_handle():
    from matplotlib.patches import Patch

    return Patch(color="0.3", alpha=0.2, linewidth=0, label="± 1 std over seeds")


def _split_legend(ax, band: bool = False) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="0.3", linestyle=SPLIT_LINE[s], label=s) for s in SPLITS]
    ax.legend(handles=handles + ([_band_handle()] if band else []), loc="best")


def _loss_axes(ax) -> None:
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss on the answer\n(nats per answer token, log scale)")


def _acc_axes(ax) -> None:
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy, whole answer right (%)")
    ax.set_ylim(-3, 103)


def _quantity_axes(ax, quantity: str, ylabel: bool = True) -> None:
    """The y axis of one of the source's per-run quantities: log scale for the loss."""
    if ylabel:
        ax.set_ylabel(QUANTITY[quantity])
    if quantity == "loss":
        ax.set_yscale("log")
    elif quantity == "acc":
        ax.set_ylim(-3, 103)


def _budget_line(ax, rows: pd.DataFrame) -> None:
    """The step budget on a t_f axis: a t_f on it is a minimum the run had not yet reached."""
    steps = sorted(rows["steps"].dropna().unique()) if "steps" in rows else []
    for T in steps:
        ax.axhline(T, color="0.45", linestyle=":", linewidth=1.1)
        # named on the line itself: the panels' legends are the models'
        ax.annotate(f"step budget T = {int(T):,}", (1, T), xycoords=("axes fraction", "data"),
                    xytext=(-3, 2), textcoords="offset points", ha="right", va="bottom",
                    fontsize=7, color="0.35")
    if steps:   # room above the line for its name
        low, high = ax.get_ylim()
        ax.set_ylim(low, max(high, low + 1.08 * (steps[-1] - low)))


def _swept_x(ax, values, key: str, log2: bool) -> None:
    ax.set_xlabel(LABEL.get(key, key))
    if log2:
        ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(values))
    ax.get_xaxis().set_major_formatter(_plain_ticks())


def _seed_lines(ax, runs: pd.DataFrame, metric: str, color: str, linestyle: str) -> None:
    """Each seed's `metric` over steps, faint, unlabelled: a collapse is one seed's, and the
    mean of seeds that collapse at different steps reads as noise on its own."""
    for _, g in runs.groupby("seed"):
        g = g.dropna(subset=[metric])
        ax.plot(g["step"], _pct(metric) * g[metric], color=color, linestyle=linestyle,
                alpha=0.35, lw=0.7)


def sanity(plt, rows: pd.DataFrame, curve_dir: Path):
    """A column per model, loss above accuracy: each seed faint, the median over seeds bold (a
    collapse is one seed's: a mean, or a band around it, would smear it over every step)."""
    runs = _runs(rows, curve_dir)
    seeded = _banded(rows)
    fig, axes = plt.subplots(2, len(runs), figsize=(6 * len(runs), 7.6), sharex=True,
                             squeeze=False)
    for col, ((model, _), r) in enumerate(runs.items()):
        lo, ac = axes[0][col], axes[1][col]
        color = _style(model)["color"]
        for split in SPLITS:
            for ax, metric in ((lo, f"{split}_loss"), (ac, f"{split}_acc")):
                if seeded:
                    _seed_lines(ax, r, metric, color, SPLIT_LINE[split])
                median = r.dropna(subset=[metric]).groupby("step")[metric].median()
                ax.plot(median.index, _pct(metric) * median, color=color, lw=2,
                        linestyle=SPLIT_LINE[split], label=f"{split}, median")
        _loss_axes(lo)
        _acc_axes(ac)
        lo.set_xlabel("")
        n = r["seed"].nunique()
        lo.set_title(f"{_name(model)}: loss ({n} seed{'s' * (n != 1)})")
        ac.set_title(f"{_name(model)}: accuracy")
        _split_legend(ac)
    drawn = "bold: the median over seeds; faint: each seed" if seeded else "one seed"
    fig.suptitle(f"modular sanity: loss and accuracy over steps, p = {int(rows['p'].iloc[0])}, "
                 f"r_train = {rows['r_train'].iloc[0]:g}\n({drawn}; training solid, validation "
                 "dashed)")
    return fig


def _shades(color, n: int) -> list:
    """n shades of one colour, light to dark: seeds of one model told apart without borrowing
    another model's colour."""
    from matplotlib.colors import to_rgb

    base = np.array(to_rgb(color))
    mix = np.linspace(0.55, -0.45, n) if n > 1 else np.array([0.0])
    return [tuple(base + m * (1 - base)) if m >= 0 else tuple(base * (1 + m)) for m in mix]


DYNAMICS = (("train_acc", "training accuracy (%)", False),
            ("train_loss", "training loss\n(log scale)", True),
            ("train_margin", "logit margin\n(true − best other)", False),
            ("head_norm", "output layer's\nweight norm", False),
            ("update_norm", "‖Δθ‖ since the last\nevaluation (log scale)", True))


def sanity_dynamics(plt, rows: pd.DataFrame, curve_dir: Path):
    """A column per model, a line per seed in shades of the model's colour (no mean: a collapse
    is one seed's, and averaging hides it), a row per quantity that explains one: accuracy and loss on the training set,
    the logits' margin, the output layer's norm and how far the weights moved between
    evaluations (docs/modular.md)."""
    groups = list(rows.groupby(CONFIG_KEY, sort=False))
    fig, axes = plt.subplots(len(DYNAMICS), len(groups), figsize=(max(5.5 * len(groups), 8), 11),
                             sharex=True, squeeze=False)
    for col, ((model, label), g) in enumerate(groups):
        names = [f"{model}-{label}-{int(seed)}" for seed in g["seed"]]
        shades = _shades(_style(model)["color"], len(names))
        for i, name in enumerate(names):
            curve = read_csv(curve_dir / f"{name}.csv", {"step", *(k for k, _, _ in DYNAMICS)},
                             f"train --task modular {name}")
            for row, (key, _, _) in enumerate(DYNAMICS):
                axes[row, col].plot(curve["step"], _pct(key) * curve[key], linewidth=0.9,
                                    color=shades[i], linestyle=("-", "--", "-.", ":")[i % 4],
                                    label=f"seed {name.rsplit('-', 1)[1]}")
        axes[0, col].set_title(_name(model))
        for row, (_, ylabel, log) in enumerate(DYNAMICS):
            ax = axes[row, col]
            if log:
                ax.set_yscale("log")
            if col == 0:
                ax.set_ylabel(ylabel)
        axes[-1, col].set_xlabel("step")
        axes[0, col].legend(loc="lower right", fontsize="small")
    first = rows.iloc[0]
    fig.suptitle(f"modular sanity, each seed: what happens around a collapse\n(AdamW lr "
                 f"{first['lr']:g}, β2 {first['beta2']:g}, weight decay {first['weight_decay']:g})")
    return fig


def swept_curves(plt, rows: pd.DataFrame, curve_dir: Path, key: str, log2: bool, study: str,
                 norm: bool = False):
    """A row per model: loss, accuracy (and parameter norm), one colour per swept value, each
    the mean over seeds with its ± std band."""
    runs = _runs(rows, curve_dir)
    models = list(dict.fromkeys(rows["model"]))
    values = sorted(rows[key].unique())
    colour, mappable = _colormap(values, log2)
    cols = 3 if norm else 2
    fig, axes = plt.subplots(len(models), cols, figsize=(5 * cols + 1.5, 3.6 * len(models)),
                             squeeze=False)
    value_of = {(m, lab): float(g[key].iloc[0]) for (m, lab), g in rows.groupby(CONFIG_KEY)}
    for i, model in enumerate(models):
        lo, ac = axes[i][0], axes[i][1]
        for (m, label), r in runs.items():
            if m != model:
                continue
            col = colour(value_of[(m, label)])
            for split in SPLITS:
                kw = dict(color=col, linestyle=SPLIT_LINE[split], lw=1.4)
                _band_line(lo, r, f"{split}_loss", **kw)
                _band_line(ac, r, f"{split}_acc", **kw)
            if norm:
                _band_line(axes[i][2], r, "param_norm", color=col, lw=1.6)
        _loss_axes(lo)
        _acc_axes(ac)
        lo.set_title(f"{_name(model)}: loss")
        ac.set_title(f"{_name(model)}: accuracy")
        _split_legend(ac, _banded(rows))
        if norm:
            axes[i][2].set_title(f"{_name(model)}: parameter norm ‖θ‖₂")
            axes[i][2].set_xlabel("step")
            axes[i][2].set_ylabel("‖θ‖₂")
    _colorbar(fig, axes, mappable, key, values, log2)
    fig.suptitle(f"modular {study}: curves coloured by {LABEL.get(key, key)} "
                 f"({_note(rows, band=True)})")
    return fig


def _seed_mean(rows: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    """`columns` averaged over seeds per `by`. Only those: a mean over the whole summary's
    hundreds of columns comes back in as many pieces, which pandas then warns about."""
    return rows[[*by, *columns]].groupby(by, as_index=False).mean()


def _eight(prefix: str = "") -> list[str]:
    """The source's eight per-run metrics' columns (within a budget with prefix a<alpha>_)."""
    return [f"{prefix}{split}_{q}" for split in SPLITS for q in QUANTITY]


def metrics_vs(plt, rows: pd.DataFrame, key: str, log2: bool, study: str):
    """The eight metrics against the swept key: best loss and the step reaching it (top), best
    accuracy and the step reaching it (bottom), a line per model and split."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.6))
    panel = {"loss": axes[0][0], "loss_step": axes[0][1], "acc": axes[1][0], "acc_step": axes[1][1]}
    mean = _seed_mean(rows, ["model", key], _eight())
    for model, g in mean.groupby("model", sort=False):
        g = g.sort_values(key)
        for split, marker in (("train", "o"), ("val", "s")):
            # validation's markers hollow and larger: where both splits reach the same value
            # (an accuracy of 1), both stay visible
            kw = dict(color=_style(model)["color"], marker=marker, ms=4 if split == "train" else 7,
                      markerfacecolor=None if split == "train" else "none",
                      linestyle=SPLIT_LINE[split], label=f"{_name(model)} {split}")
            for q, ax in panel.items():
                ax.plot(g[key], _pct(q) * g[f"{split}_{q}"], **kw)
    for q, ax in panel.items():
        _quantity_axes(ax, q)
        _swept_x(ax, rows[key].unique(), key, log2)
        if q.endswith("_step"):
            _budget_line(ax, rows)
    panel["acc"].legend(fontsize=7, loc="best")
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
        for split in SPLITS:
            kw = dict(color="0.15", linestyle=SPLIT_LINE[split], lw=2)
            lo.plot(c["step"], c[f"{split}_loss"], label=f"all orders, {split}", **kw)
            ac.plot(c["step"], 100 * c[f"{split}_acc"], label=f"all orders, {split}", **kw)
            for k in orders_:
                kw = dict(color=shades[k], linestyle=SPLIT_LINE[split], lw=1.3)
                lo.plot(c["step"], c[f"o{k}_{split}_loss"], label=f"order {k}, {split}", **kw)
                ac.plot(c["step"], 100 * c[f"o{k}_{split}_acc"], label=f"order {k}, {split}",
                        **kw)
        _loss_axes(lo)
        _acc_axes(ac)
        lo.set_title(f"{_name(model)}: loss")
        ac.set_title(f"{_name(model)}: accuracy")
        ac.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"modular orders: p = {int(rows['p'].iloc[0])}, orders "
                 f"{' and '.join(map(str, orders_))} mixed, overall and per order ({_note(rows)})")
    return fig


def size_curves(plt, rows: pd.DataFrame, curve_dir: Path):
    """A column per L; per model a row of loss (log scale) and one of accuracy over steps,
    coloured by d (log2), each the mean over seeds with its ± std band."""
    runs = _runs(rows, curve_dir)
    models = list(dict.fromkeys(rows["model"]))
    Ls = sorted(rows["layers"].unique())
    ds = sorted(rows["d_model"].unique())
    colour, mappable = _colormap(ds, True)
    fig, axes = plt.subplots(2 * len(models), len(Ls), squeeze=False, sharey="row",
                             figsize=(4.6 * len(Ls) + 1.5, 3.3 * 2 * len(models)))
    arch = {(m, lab): g.iloc[0] for (m, lab), g in rows.groupby(CONFIG_KEY)}
    for (m, label), r in runs.items():
        a = arch[(m, label)]
        i, j = 2 * models.index(m), Ls.index(a["layers"])
        for split in SPLITS:
            kw = dict(color=colour(a["d_model"]), linestyle=SPLIT_LINE[split], lw=1.4)
            _band_line(axes[i][j], r, f"{split}_loss", **kw)
            _band_line(axes[i + 1][j], r, f"{split}_acc", **kw)
    for i, m in enumerate(models):
        for j, L in enumerate(Ls):
            lo, ac = axes[2 * i][j], axes[2 * i + 1][j]
            _loss_axes(lo)
            _acc_axes(ac)
            lo.set_title(f"{_name(m)}, L = {int(L)}: loss")
            ac.set_title(f"{_name(m)}, L = {int(L)}: accuracy")
            if j:
                lo.set_ylabel("")
                ac.set_ylabel("")
        _split_legend(axes[2 * i + 1][0], _banded(rows))
    _colorbar(fig, axes, mappable, "d_model", ds, True)
    fig.suptitle(f"modular size: loss and accuracy over steps per depth, coloured by width "
                 f"({_note(rows, band=True)})")
    return fig


def _size_means(rows: pd.DataFrame) -> pd.DataFrame:
    return _seed_mean(rows, ["model", "layers", "d_model"], [*_eight(), "params"])


def size_metrics(plt, rows: pd.DataFrame):
    """The eight metrics against d (a line per L) and against L (a line per d): a row per
    quantity (best loss, best accuracy, their t_f), train and val in columns of their own."""
    mean = _size_means(rows)
    fig, axes = plt.subplots(4, 4, figsize=(16, 13.5), sharey="row")
    for model, g in mean.groupby("model", sort=False):
        color = _style(model)["color"]
        for x, lines, col0, short in (("d_model", "layers", 0, "L"), ("layers", "d_model", 2, "d")):
            for k, (v, sub) in enumerate(g.groupby(lines)):
                sub = sub.sort_values(x)
                for row, q in enumerate(QUANTITY):
                    for c, split in enumerate(SPLITS):
                        axes[row][col0 + c].plot(sub[x], _pct(q) * sub[f"{split}_{q}"],
                                                 color=color,
                                                 marker=MARKERS[k % 5], ms=5,
                                                 linestyle=SPLIT_LINE[split],
                                                 label=f"{_name(model)}, {short} = {int(v)}")
    for row, q in enumerate(QUANTITY):
        for c, ax in enumerate(axes[row]):
            _quantity_axes(ax, q, ylabel=c == 0)
            if q.endswith("_step"):
                _budget_line(ax, rows)
            x, log2 = (("d_model", True), ("d_model", True), ("layers", False), ("layers", False))[c]
            _swept_x(ax, rows[x].unique(), x, log2)
            ax.set_title(f"{('train', 'val')[c % 2]}, against {('d', 'L')[c // 2]}", fontsize=10)
    for col, where in ((0, "outside lower left"), (2, "outside lower right")):
        handles, labels = axes[0][col].get_legend_handles_labels()
        fig.legend(handles, labels, loc=where, ncols=3, fontsize=8,
                   title="against d: a line per L" if col == 0 else "against L: a line per d")
    fig.suptitle("modular size: metrics against width d and depth L, train solid and val dashed "
                 f"({_note(rows)})")
    return fig


def size_params(plt, rows: pd.DataFrame):
    """The eight metrics against the parameter count P (no embedding): a column per quantity,
    train on top and val below, a point per (model, L, d), the marker telling L."""
    mean = _size_means(rows)
    fig, axes = plt.subplots(2, 4, figsize=(17, 7.8), sharey="col")
    Ls = sorted(rows["layers"].unique())
    for model, g in mean.groupby("model", sort=False):
        color = _style(model)["color"]
        for L, sub in g.groupby("layers"):
            for r, split in enumerate(SPLITS):
                for c, q in enumerate(QUANTITY):
                    axes[r][c].scatter(sub["params"], _pct(q) * sub[f"{split}_{q}"],
                                       color=color, s=28,
                                       marker=MARKERS[Ls.index(L) % 5],
                                       label=f"{_name(model)}, L = {int(L)}")
    for r, split in enumerate(SPLITS):
        for c, q in enumerate(QUANTITY):
            ax = axes[r][c]
            _quantity_axes(ax, q)
            if q.endswith("_step"):
                _budget_line(ax, rows)
            ax.set_xscale("log")
            ax.set_xlabel("parameters P (no embedding)")
            ax.set_title(split)
    axes[0][1].legend(fontsize=7, loc="best")
    fig.suptitle(f"modular size: metrics against the parameter count P ({_note(rows)})")
    return fig


def compute_budgets(plt, rows: pd.DataFrame, budgets: list[float]):
    """The eight metrics within the first alpha*T steps against B, a line per alpha: a row per
    quantity, a column per model and split."""
    models = list(dict.fromkeys(rows["model"]))
    colour, mappable = _colormap(budgets, False)
    panels = [(m, s) for m in models for s in SPLITS]
    fig, axes = plt.subplots(4, len(panels), figsize=(3.9 * len(panels) + 1.5, 12.5),
                             squeeze=False, sharey="row")
    mean = _seed_mean(rows, ["model", "batch_size"], [c for a in budgets for c in _eight(f"a{a:g}_")])
    for c, (model, split) in enumerate(panels):
        g = mean[mean["model"] == model].sort_values("batch_size")
        for row, q in enumerate(QUANTITY):
            ax = axes[row][c]
            for a in budgets:
                ax.plot(g["batch_size"], _pct(q) * g[f"a{a:g}_{split}_{q}"], color=colour(a),
                        marker="o", ms=4)
            _quantity_axes(ax, q, ylabel=c == 0)
            _swept_x(ax, rows["batch_size"].unique(), "batch_size", True)
            ax.set_title(f"{_name(model)}, {split}")
    _colorbar(fig, axes, mappable, "budget α", budgets, False)
    fig.suptitle(f"modular compute: metrics within the first α·T steps against batch size\n"
                 f"(a line per budget α, T = {int(rows['steps'].iloc[0])}, {_note(rows)})")
    return fig


def render_modular(summary: pd.DataFrame, eval_dir: Path, data_dir: Path, out_dir: Path) -> list[Path]:
    """plots/modular/<study>_curves.png and <study>_metrics.png for every study with records,
    plus compute_budgets.png and size_params.png."""
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
            keep(sanity_dynamics(plt, rows, curve_dir / "sanity"), "sanity_dynamics")
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
            keep(size_params(plt, rows), "size_params")
    return written
