"""charlm's compute table (markdown) and loss-curves figure."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from arithrepro.report.plotting import (STYLE, arch_style, pyplot, read_csv, save, seed_note,
                                       seeds_per_cell, seed_spread, shade_spread)
from arithrepro.runs import CONFIG_KEY, RUNS, Files, run_name


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def compute_markdown(frame: pd.DataFrame, device: str) -> str:
    """One table per T: the formulas' FLOPs (and whose formula), the counted ones, sequential
    matmuls and measured time per token, with FLOPs and time relative to the model with the
    fewest counted FLOPs."""
    out = [f"# charlm compute: generating and training on T tokens (batch 1, {device})\n",
           "FLOPs by a formula and as counted by torch (matmuls, head and attention included); "
           "the `formula` column says whose: the source's (RNN with g = 1, transformer) or this "
           "project's GRU extension (the source's RNN formula with g = 3, one matrix per gate); "
           "sequential matmuls: the source's counts, recurrent T·L to generate and 2·T·L to "
           "train (backpropagation through time is sequential too), transformer 6·L per forward "
           "pass and 6·L per backward pass, 12·L to train; to generate T tokens the source "
           "answered 6·L (one pass), this table counts the T cached passes that generating "
           "takes, one per token, 6·L·T. Time = median seconds per token, the device "
           "synchronized around each measurement. "
           "`x` columns: relative to the model with the fewest counted FLOPs at that T; where "
           "time grows much less (or more) than FLOPs, the FLOP count does not predict the cost.\n"]
    for T, rows in frame.groupby("T", sort=True):
        ref = rows.loc[rows["counted_train_flops"].idxmin()]
        out += [f"## T = {T}\n",
                "| model | params | L | D | formula | gen FLOPs (formula / counted) "
                "| train FLOPs (formula / counted) "
                "| sequential matmuls (gen / train) | gen ms/token | train ms/token "
                "| gen FLOPs x / time x | train FLOPs x / time x |",
                "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for _, r in rows.iterrows():
            gx = r["counted_gen_flops"] / ref["counted_gen_flops"]
            gt = r["gen_s_per_token"] / ref["gen_s_per_token"]
            tx = r["counted_train_flops"] / ref["counted_train_flops"]
            tt = r["train_s_per_token"] / ref["train_s_per_token"]
            out.append(
                f"| {r['model']} ({r['arch']}) | {_si(r['params'])} | {r['layers']} | {r['d_model']} "
                f"| {r.get('formula', 'source')} | {_si(r['formula_gen_flops'])} / {_si(r['counted_gen_flops'])} "
                f"| {_si(r['formula_train_flops'])} / {_si(r['counted_train_flops'])} "
                f"| {r['seq_matmuls_gen']:,} / {r['seq_matmuls_train']:,} "
                f"| {1e3 * r['gen_s_per_token']:.3f} | {1e3 * r['train_s_per_token']:.3f} "
                f"| {gx:.2f} / {gt:.2f} | {tx:.2f} / {tt:.2f} |")
        out.append("")
    return "\n".join(out)


def steps_markdown(frame: pd.DataFrame, device: str) -> str:
    """One table per T: seconds per 100 training steps at the source's batch (median and range
    over the rounds), and each relative to the fastest configuration at that T."""
    threads = sorted(set(int(t) for t in frame["threads"]))
    out = [f"# charlm training steps: seconds per 100 steps ({device}, "
           f"{'/'.join(map(str, threads))} thread{'s' if threads != [1] else ''})\n",
           "Each configuration timed in every round through the training loop (forward, loss, "
           "backward, optimizer step) on random characters, rounds interleaved so that the "
           "machine's drift falls on all alike; median over the rounds, their range beside it. "
           "`attention`: the transformer's fused kernel or the same maths written out (the "
           "source's path with flash attention off).\n"]
    for T, rows in frame.groupby("T", sort=True):
        stat = rows.groupby(["model", "attention"], sort=False)["s_per_100_steps"] \
            .agg(["median", "min", "max", "count"]).reset_index()
        fastest = stat["median"].min()
        out += [f"## T = {T}, batch {int(rows['batch_size'].iloc[0])}\n",
                "| model | attention | s / 100 steps (median) | range over rounds | rounds | x fastest |",
                "|---|---|---:|---:|---:|---:|"]
        for _, r in stat.iterrows():
            out.append(f"| {r['model']} | {r['attention'] or '–'} | {r['median']:.2f} "
                       f"| {r['min']:.2f}–{r['max']:.2f} | {int(r['count'])} "
                       f"| {r['median'] / fastest:.2f} |")
        out.append("")
    return "\n".join(out)


CORPORA = {"python-docs": "Python's documentation", "tinystories": "TinyStories",
           "arithmetic": "expr's arithmetic lines"}


def corpus_name(data_dir: Path) -> str:
    """What the runs trained on, from the corpus stage's meta.json (its source, or a file's
    name)."""
    from arithrepro.io import read_json

    meta = read_json(Path(data_dir) / "meta.json", ("source",))
    if meta["source"] == "file" and meta.get("path"):
        return Path(meta["path"]).name
    return CORPORA.get(meta["source"], meta["source"])


def render_charlm(summary: pd.DataFrame, eval_dir: Path, data_dir: Path, out_dir: Path,
                  runs_dir: Path = Path("runs")) -> list[Path]:
    """plots/charlm/loss_curves.png, titled with the corpus data_dir/meta.json names: every
    run's training loss (a running mean over about 2 % of the steps, the raw values faint) and
    validation loss, one panel per seq_length. A run trained with several seeds is drawn as
    their mean, its validation loss shaded ± std."""
    runs = summary.sort_values(["seq_length", "params"])
    lengths = sorted(runs["seq_length"].unique())
    models = list(dict.fromkeys(runs["model"]))
    colours = {m: arch_style(m, models)["color"] for m in models}
    corpus = corpus_name(data_dir)
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(lengths), figsize=(5.6 * len(lengths), 4.6),
                                 squeeze=False, sharey=True)
        for ax, T in zip(axes[0], lengths):
            for (model, size), seeds in runs[runs["seq_length"] == T].groupby(CONFIG_KEY,
                                                                              sort=False):
                train, val = _seed_curves(Path(runs_dir), model, size, seeds["seed"])
                train["loss"] = train["loss"] / LN2   # nats to bits per character
                for col in ("mean", "low", "high"):
                    val[col] = val[col] / LN2
                c = colours[model]
                window = max(1, len(train) // 50)
                ax.plot(train["step"], train["loss"], color=c, alpha=0.15, linewidth=0.6)
                ax.plot(train["step"], train["loss"].rolling(window, min_periods=1).mean(),
                        color=c, linewidth=1.4,
                        label=f"{model} ({_si(seeds['params'].mean())} params): train")
                ax.plot(val["step"], val["mean"], color=c, linestyle="--", marker="o",
                        markersize=2.5, linewidth=1.0,
                        label=f"{model}: validation, final "
                              f"{_final(seeds['final_val_loss'] / LN2)}")
                shade_spread(ax, val, "step", c)
            ax.set_title(f"seq_length {int(T)}")
            ax.set_xlabel("step")
            # each panel names its own runs and their final values, in the corner the curves
            # leave empty once they fall from the untrained loss
            ax.legend(loc="upper right", fontsize=8)
        axes[0][0].set_ylabel("cross-entropy (bits per character)")
        n = seeds_per_cell(runs)
        if n.max() > 1:
            fig.suptitle(f"charlm on {corpus}: bits per character, {seed_note(n, 'mean')}\n"
                         "(train: running mean; validation: dashed, shaded ± sample std)")
        else:
            fig.suptitle(f"charlm on {corpus}: bits per character (train: running mean, "
                         "validation: dashed)")
        return [save(plt, fig, Path(out_dir) / "loss_curves.png")]


def _seed_curves(runs_dir: Path, model: str, size: str, seeds):
    """A run's training loss, mean over its seeds per step, and its validation loss as a
    seed_spread frame (step, n, mean, low, high: mean ± std), from each run's dvclive series
    (<run's live folder>/plots/metrics/{train,val}/loss.tsv), its folder under `runs_dir`."""
    names = [run_name(model, size, int(seed)) for seed in seeds]

    def series(name: str, kind: str) -> pd.DataFrame:
        live = runs_dir / Files("charlm", name).live.relative_to(RUNS)
        return read_csv(live / "plots" / "metrics" / kind / "loss.tsv",
                        {"step", "loss"}, f"train --task charlm {name}")

    train = pd.concat([series(n, "train") for n in names])
    val = pd.concat([series(n, "val") for n in names]).rename(columns={"loss": "val_loss"})
    return (train.groupby("step", as_index=False)["loss"].mean(),
            seed_spread(val, "step", "val_loss"))


LN2 = math.log(2)


def _final(losses: pd.Series) -> str:
    """The final validation loss: one seed's value, or mean ± std over the seeds."""
    if len(losses) == 1:
        return f"{losses.iloc[0]:.3f}"
    return f"{losses.mean():.3f} ± {losses.std():.3f}"
