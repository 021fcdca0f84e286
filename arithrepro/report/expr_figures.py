"""The expr figures: accuracy and validation loss against parameters, accuracy by length,
and the length distribution of the splits."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from arithrepro.findings.expr import GPT4O, GPT4O_LENGTHS
from arithrepro.report.plotting import (OOD_SHADE, SPLIT_STYLES, STYLE, arch_order, arch_style,
                                        display_name, pyplot, read_csv, require, save, seed_note,
                                        seed_spread, seeds_per_cell, shade_spread)
from arithrepro.runs import CONFIG_KEY

# The published GPT-4o score on the expr test problems: a reference line, not a run of ours.
GPT4O_ACC = round(100 * GPT4O, 2)
GPT4O_LABEL = (f"GPT-4o, {GPT4O_ACC:.2f} % (published figure: 10,000 test problems of the "
               f"source's {GPT4O_LENGTHS[0]}–{GPT4O_LENGTHS[1]} characters)")


def _by_size(summary: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (model, size): params, n, mean and std over seeds of `metric`, by params ascending."""
    rows = summary.dropna(subset=[metric, "params"])
    return (rows.groupby(CONFIG_KEY, sort=False)
                .agg(params=("params", "mean"), n=(metric, "size"),
                     mean=(metric, "mean"), std=(metric, "std"))
                .reset_index()
                .sort_values("params"))


def _plot_by_size(ax, cells: pd.DataFrame, models: list[str], scale: float = 1.0) -> None:
    """One line per architecture through its sizes; error bars where there are several seeds."""
    for model in arch_order(cells["model"]):
        c = cells[cells["model"] == model]
        style = arch_style(model, models)
        ax.plot(c["params"], scale * c["mean"], label=display_name(model), markersize=6, **style)
        spread = c[c["n"] > 1]
        if len(spread):
            ax.errorbar(spread["params"], scale * spread["mean"], yerr=scale * spread["std"],
                        fmt="none", ecolor=style["color"], elinewidth=1, capsize=3)


def _label_log_axis(axis, fmt) -> None:
    """Plain-number tick labels on a log axis, minor ticks labelled when there are few decades.

    matplotlib's default leaves an axis spanning one or two decades with a label or two in
    powers-of-ten notation; these read as values (10k, 0.2) and stay uncrowded.
    """
    lo, hi = axis.get_view_interval()
    span = math.log10(hi / lo)
    keep = {1} if span > 2 else {1, 2, 5} if span > 0.6 else set(range(1, 10))

    def label(value, _pos):
        if value <= 0:
            return ""
        mantissa = round(value / 10 ** math.floor(math.log10(value) + 1e-9))
        return fmt(value) if mantissa in keep else ""

    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(FuncFormatter(label))


def _params_label(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:g}"


def _measured_ticks(ax, params) -> None:
    """The parameter axis ticked at the counts the models have, and only there: a decade's
    round numbers would leave the points between unlabelled."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ticks = sorted({float(p) for p in params})
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(ticks, [_params_label(t) for t in ticks], rotation=45, ha="right",
                  rotation_mode="anchor")
    lo, hi = min(ticks), max(ticks)
    ax.set_xlim(lo / 1.25, hi * 1.25)


def render_expr(summary: pd.DataFrame, by_length_dir: Path, data_dir: Path,
                out_dir: Path) -> list[Path]:
    """The expr figures under out_dir; returns their paths.

    summary: the expr rows of metrics/summary.csv; by_length_dir: <cell>.csv per-length
    accuracies; data_dir: data/expr (its lengths.csv).
    """
    by_length_dir, out_dir = Path(by_length_dir), Path(out_dir)
    lengths_csv = Path(data_dir) / "lengths.csv"
    require(summary, {"model", "size", "seed", "params", "test_acc", "best_val_loss"},
             "summary")
    if summary.empty:
        raise ValueError("summary: no expr runs to draw")
    # Every input is read before the first figure is drawn, so that a missing file fails the
    # stage before it has replaced some of the figures but not others.
    lengths = read_csv(lengths_csv, {"split", "length", "count", "percent"},
                       "generate-datasets", text={"split"})
    per_length = _largest_by_length(summary, by_length_dir)
    models = sorted(set(summary["model"]))
    plt = pyplot()
    drawers = {
        "accuracy_vs_params": lambda: _accuracy_vs_params(plt, summary, models, lengths),
        "accuracy_vs_length": lambda: _accuracy_vs_length(plt, per_length, models, lengths),
        "val_loss_vs_params": lambda: _val_loss_vs_params(plt, summary, models),
        "length_distribution": lambda: _length_distribution(plt, lengths),
    }
    with plt.rc_context(STYLE):
        return [save(plt, draw(), out_dir / f"{name}.png") for name, draw in drawers.items()]


def _accuracy_vs_params(plt, summary: pd.DataFrame, models: list[str], lengths: pd.DataFrame):
    fig, ax = plt.subplots()
    _plot_by_size(ax, _by_size(summary, "test_acc"), models, scale=100)
    ax.legend(loc="best")
    test = lengths[lengths["split"] == "test"]["length"]
    lo, hi = int(test.min()), int(test.max())
    # GPT-4o's score belongs on the axis only where the test problems are the ones it answered
    if (lo, hi) == GPT4O_LENGTHS:
        handle = ax.axhline(GPT4O_ACC, color="0.25", linestyle=":", linewidth=1.6)
        caption = GPT4O_LABEL
    else:
        handle = plt.Line2D([], [], linestyle="none")
        caption = (f"GPT-4o's published {GPT4O_ACC:.2f} % is not drawn: it answered problems of "
                   f"{GPT4O_LENGTHS[0]}–{GPT4O_LENGTHS[1]} characters, these are {lo}–{hi}")
    ax.set_xscale("log")
    ax.set_ylim(0, 100)
    _measured_ticks(ax, summary["params"].dropna())
    ax.set_xlabel("parameters (the models' counts, log scale)")
    ax.set_ylabel("test accuracy, exact match (%)")
    note = seed_note(seeds_per_cell(summary), "mean ± std")
    ax.set_title(f"expr: test accuracy vs model size ({note})")
    # The reference gets its own legend below the axes, like a caption: its long label would
    # crowd the architectures' legend inside, and a legend holding both would not fit one row.
    fig.legend([handle], [caption], loc="outside lower center", frameon=False,
               handlelength=2.4)
    return fig


def _val_loss_vs_params(plt, summary: pd.DataFrame, models: list[str]):
    fig, ax = plt.subplots()
    _plot_by_size(ax, _by_size(summary, "best_val_loss"), models)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="minor", alpha=0.15)
    _measured_ticks(ax, summary["params"].dropna())
    _label_log_axis(ax.yaxis, lambda v: f"{v:g}")
    ax.set_xlabel("parameters (the models' counts, log scale)")
    ax.set_ylabel("best validation loss (nats/token, log scale)")
    note = seed_note(seeds_per_cell(summary), "mean ± std")
    ax.set_title(f"expr: best validation loss vs model size ({note})")
    ax.legend(loc="best")
    return fig


def _largest_by_length(summary: pd.DataFrame, by_length_dir: Path) -> pd.DataFrame:
    """Per-length accuracy of each architecture's largest size, over its seeds.

    Columns: model, size, params, seeds, split, length, and of seed_spread: n, mean, low, high
    (mean ± std, fractions).
    """
    frames = []
    for model, runs in summary.groupby("model"):
        size = runs.groupby("size")["params"].mean().idxmax()
        cell = runs[runs["size"] == size]
        per_seed = [read_csv(by_length_dir / f"{model}-{size}-{int(seed)}.csv",
                              {"split", "length", "accuracy"}, "evaluate", text={"split"})
                    for seed in sorted(cell["seed"])]
        spread = seed_spread(pd.concat(per_seed), ["split", "length"], "accuracy")
        frames.append(spread.assign(model=model, size=size, params=cell["params"].mean(),
                                    seeds=len(per_seed)))
    return pd.concat(frames, ignore_index=True)


def _shade_ood(ax, lengths: pd.Series) -> None:
    """Grey band over the OOD split's length range, labelled in place."""
    if lengths.empty:
        return
    lo, hi = lengths.min() - 0.5, lengths.max() + 0.5
    ax.axvspan(lo, hi, **OOD_SHADE)
    ax.text((lo + hi) / 2, 0.97, "out of distribution", transform=ax.get_xaxis_transform(),
            ha="center", va="top", fontsize=8, color="0.3")


def _accuracy_vs_length(plt, per_length: pd.DataFrame, models: list[str],
                        lengths: pd.DataFrame):
    fig, ax = plt.subplots()
    # how many problems each point rests on: faint bars on an axis of their own, behind, over
    # the OOD band
    counts = ax.twinx()
    _shade_ood(counts, per_length.loc[per_length["split"] == "ood", "length"])
    scored = lengths[lengths["split"].isin(["test", "ood"])]
    counts.bar(scored["length"], scored["count"], width=0.8, color="0.72", alpha=0.45)
    counts.set_yscale("log")
    counts.set_ylabel("problems per length (grey bars, log scale)", color="0.4")
    counts.tick_params(axis="y", colors="0.4")
    counts.grid(False)
    ax.set_zorder(counts.get_zorder() + 1)
    ax.patch.set_visible(False)
    for model in arch_order(per_length["model"]):
        rows = per_length[per_length["model"] == model]
        style = arch_style(model, models)
        first = rows.iloc[0]
        label = f"{display_name(model)} {first['size']} ({first['params']:,.0f} params)"
        # Test and OOD drawn apart, so that a line never joins one split's point to the other's.
        for split, linestyle in (("test", "-"), ("ood", "--")):
            part = rows[rows["split"] == split].sort_values("length")
            ax.plot(part["length"], 100 * part["mean"], linestyle=linestyle, markersize=4,
                    label=label, **style)
            shade_spread(ax, part, "length", style["color"], scale=100, bounds=(0, 1))
            label = None
    ax.set_ylim(-2, 102)
    ax.set_xlabel("problem length (characters)")
    ax.set_ylabel("accuracy, exact match (%)")
    note = seed_note(per_length.groupby("model")["seeds"].first(), "mean ± std")
    ax.set_title("expr: accuracy by problem length, each architecture's largest size in this "
                 f"run\n({note})")
    # the line styles are the splits': say so beside the models
    handles, labels = ax.get_legend_handles_labels()
    for split, linestyle in (("test", "-"), ("OOD", "--")):
        handles.append(plt.Line2D([], [], color="0.3", linestyle=linestyle))
        labels.append(f"{split} problems")
    # below the axes: inside, the legend would cover the lines or the band's label
    fig.legend(handles, labels, loc="outside lower center", ncols=2, frameon=False)
    return fig


def _length_distribution(plt, lengths: pd.DataFrame):
    fig, ax = plt.subplots()
    _shade_ood(ax, lengths.loc[lengths["split"] == "ood", "length"])
    splits = [s for s in SPLIT_STYLES if s in set(lengths["split"])]
    splits += sorted(set(lengths["split"]) - set(splits))
    for split in splits:
        rows = lengths[lengths["split"] == split].sort_values("length")
        n = int(rows["count"].sum())
        ax.step(rows["length"], rows["percent"], where="mid", label=f"{split} ({n:,} problems)",
                **SPLIT_STYLES.get(split, {}))
    # Headroom for the "out of distribution" label above the OOD split's peak.
    ax.set_ylim(0, 1.15 * lengths["percent"].max())
    ax.set_xlabel("problem length (characters)")
    ax.set_ylabel("share of the split's problems (%)")
    ax.set_title("expr: problem length distribution per split")
    # Upper centre: the short lengths peak at the left and the OOD band fills the right.
    ax.legend(loc="upper center")
    return fig
