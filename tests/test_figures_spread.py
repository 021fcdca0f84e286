"""Figures resting on several seeds show their spread: bands over curves, error bars over points.

Every renderer is fed synthetic runs with three seeds and with one; the figures are caught
before they are closed and their bands and bars compared with the spread of the inputs.
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from arithrepro.report import (abacus_looped_figures, charlm_figures, expr_figures, modular_figures,
                               plotting)

THREE, ONE = (0, 1, 2), (0,)


# --- synthetic inputs: one function per task, writing what its renderer reads ---------------

def _jitter(*key) -> float:
    """A fixed pseudo-random number in -1..1 for a (seed, x, ...) key: seeds differ unevenly."""
    return float(np.random.default_rng(zlib.crc32(repr(key).encode())).uniform(-1, 1))


def expr_inputs(root: Path, seeds) -> tuple[pd.DataFrame, Path, Path]:
    params = {"gpt": {"small": 40_000, "large": 1_200_000}, "lstm": {"small": 9_000, "large": 290_000}}
    rows, by_length = [], root / "by_length"
    by_length.mkdir(parents=True)
    for i, model in enumerate(params):
        for j, (size, p) in enumerate(params[model].items()):
            for seed in seeds:
                top = 0.55 + 0.2 * j - 0.15 * i
                rows.append({"model": model, "size": size, "seed": seed, "params": p,
                             "test_acc": top + 0.04 * _jitter(seed, model, size),
                             "best_val_loss": 0.8 / (1 + 2 * j + i) + 0.03 * (1 + _jitter(seed, size))})
                lengths = [("test", n) for n in range(8, 31)] + [("ood", n) for n in range(31, 41)]
                acc = [min(1, max(0, top + 0.3 - 0.03 * (n - 8) + 0.08 * _jitter(seed, model, n)))
                       for _, n in lengths]
                pd.DataFrame({"split": [s for s, _ in lengths], "length": [n for _, n in lengths],
                              "accuracy": acc}).to_csv(by_length / f"{model}-{size}-{seed}.csv",
                                                       index=False)
    lengths = [{"split": s, "length": n, "count": 10, "percent": 100 / len(r)}
               for s, r in (("train", range(8, 31)), ("test", range(8, 31)), ("ood", range(31, 41)))
               for n in r]
    pd.DataFrame(lengths).to_csv(root / "lengths.csv", index=False)
    return pd.DataFrame(rows), by_length, root


ABACUS = {"grid_max": 8, "max_digits": 4}


def abacus_inputs(root: Path, seeds) -> tuple[pd.DataFrame, Path, Path]:
    eval_dir, data_dir = root / "eval", root / "data"
    eval_dir.mkdir(parents=True)
    data_dir.mkdir()
    (data_dir / "meta.json").write_text(json.dumps(ABACUS))
    rows = []
    for size, trained in (("l2r2", 2), ("l4r4", 4)):
        for seed in seeds:
            rows.append({"model": "abacus", "size": size, "seed": seed, "recurrences": trained})
            grid = [{"recurrences": r, "n1": a, "n2": b,
                     "accuracy": min(1, max(0, 1.1 - 0.1 * max(a, b) - 0.15 * abs(math.log2(r / trained))
                                        + 0.15 * _jitter(seed, size, r, a, b)))}
                    for r in (1, 2, 4, 8) for a in range(1, 9) for b in range(1, 9)]
            pd.DataFrame(grid).to_csv(eval_dir / f"abacus-{size}-{seed}.csv", index=False)
    return pd.DataFrame(rows), eval_dir, data_dir


def looped_inputs(root: Path, seeds) -> tuple[pd.DataFrame, Path, Path]:
    eval_dir, data_dir = root / "eval", root / "data"
    eval_dir.mkdir(parents=True)
    data_dir.mkdir()
    (data_dir / "meta.json").write_text(json.dumps({"train_digits": 10, "variant": "addition"}))
    rows = []
    for model, fall in (("standard", 0.12), ("looped", 0.03)):
        for seed in seeds:
            rows.append({"model": model, "size": "small", "seed": seed})
            digits = np.arange(1, 21)
            acc = np.clip(1 - fall * np.maximum(0, digits - 10)
                          + 0.08 * np.array([_jitter(seed, model, d) for d in digits]), 0, 1)
            pd.DataFrame({"digits": digits, "accuracy": acc, "digit_acc": 0.5 + acc / 2}).to_csv(
                eval_dir / f"{model}-small-{seed}.csv", index=False)
    return pd.DataFrame(rows), eval_dir, data_dir


def modular_inputs(root: Path, seeds) -> tuple[pd.DataFrame, Path]:
    out, rows = root / "plots", []
    (out / "curves" / "sanity").mkdir(parents=True)
    steps = np.arange(0, 2001, 50)
    for model, when in (("gpt-sin", 600), ("lstm-std", 1200)):
        for seed in seeds:
            rows.append({"task": "modular", "model": model, "size": "sanity", "seed": seed,
                         "p": 97, "r_train": 0.5, "steps": 2000, "lr": 1e-3, "beta2": 0.98,
                         "weight_decay": 1.0})
            shift = when + 150 * _jitter(seed, model)
            val_acc = 1 / (1 + np.exp(-(steps - shift) / 80))
            train_acc = 1 / (1 + np.exp(-(steps - 200) / 60))
            pd.DataFrame({"step": steps, "train_loss": 4.6 * (1 - train_acc) + 1e-3,
                          "val_loss": 4.6 * (1 - val_acc) + 2e-3 + 0.5 * np.exp(-((steps - 300) / 300) ** 2),
                          "train_acc": train_acc, "val_acc": val_acc, "train_margin": 6 * train_acc,
                          "head_norm": 9 + train_acc, "update_norm": 0.1 + 0 * steps}).to_csv(
                out / "curves" / "sanity" / f"{model}-sanity-{seed}.csv", index=False)
    return pd.DataFrame(rows), out


def charlm_inputs(root: Path, seeds) -> tuple[pd.DataFrame, Path]:
    """The summary rows and each run's dvclive series (runs/charlm/<run>/live/...) of two
    models at two seq_lengths; returns (rows, the figures' folder)."""
    out, rows = root / "plots", []
    out.mkdir(parents=True)
    for T in (16, 64):
        for i, (model, params) in enumerate((("gru", 50_000), ("transformer-1", 120_000))):
            for seed in seeds:
                steps = np.arange(1, 401)
                floor = 1.4 + 0.15 * i - 0.05 * math.log2(T / 16)
                loss = floor + 2.8 * np.exp(-steps / 80) + 0.1 * np.array(
                    [_jitter(seed, model, T, s) for s in steps])
                val_steps = np.arange(50, 401, 50)
                val = floor + 0.1 + 2.8 * np.exp(-val_steps / 80) + 0.06 * (1 + _jitter(seed, model, T))
                name = f"{model}-s{T}-{seed}"
                # dvclive's series: tab-separated, the value column named after the series
                live = root / "runs" / "charlm" / name / "live" / "plots" / "metrics"
                for kind, x, y in (("train", steps, loss), ("val", val_steps, val)):
                    (live / kind).mkdir(parents=True)
                    pd.DataFrame({"step": x, "loss": y}).to_csv(live / kind / "loss.tsv",
                                                                sep="\t", index=False)
                rows.append({"model": model, "size": f"s{T}", "seed": seed, "params": params,
                             "seq_length": T, "final_val_loss": val[-1]})
    return pd.DataFrame(rows), out


# --- catching the figures --------------------------------------------------------------------

@pytest.fixture
def drawn(monkeypatch) -> dict:
    """{png name: its figure}, filled as the renderers save (and close) their figures."""
    shown = {}
    for module in (expr_figures, abacus_looped_figures, modular_figures, charlm_figures):
        def save(plt, fig, path, real=module.save):
            shown[Path(path).name] = fig
            return real(plt, fig, path)
        monkeypatch.setattr(module, "save", save)
    return shown


def _bands(ax) -> list[np.ndarray]:
    """The vertices of each fill_between band of the axes."""
    from matplotlib.collections import PolyCollection

    return [c.get_paths()[0].vertices for c in ax.collections if isinstance(c, PolyCollection)]


def _bars(ax) -> list[np.ndarray]:
    """The (x, y) segments of each set of error bars of the axes."""
    from matplotlib.collections import LineCollection

    return [np.asarray(c.get_segments()) for c in ax.collections if isinstance(c, LineCollection)]


def _band_at(band: np.ndarray, x: float) -> tuple[float, float]:
    ys = band[np.isclose(band[:, 0], x), 1]
    return ys.min(), ys.max()


def _title(fig) -> str:
    return " ".join([fig._suptitle.get_text() if fig._suptitle else ""]
                    + [ax.get_title() for ax in fig.axes])


# --- the shared helper -----------------------------------------------------------------------

def test_seed_spread_mean_std_and_range_on_known_numbers():
    frame = pd.DataFrame({"x": [1, 1, 1, 2, 3], "v": [0.1, 0.2, 0.6, 0.5, float("nan")]})
    std = plotting.seed_spread(frame, "x", "v")
    assert std["x"].tolist() == [1, 2]  # a NaN is no seed
    assert std["n"].tolist() == [3, 1]
    s = math.sqrt(((0.1 - 0.3) ** 2 + (0.2 - 0.3) ** 2 + (0.6 - 0.3) ** 2) / 2)
    assert std["mean"].tolist() == pytest.approx([0.3, 0.5])
    assert std["low"].tolist() == pytest.approx([0.3 - s, 0.5])
    assert std["high"].tolist() == pytest.approx([0.3 + s, 0.5])
    rng = plotting.seed_spread(frame, "x", "v", band="range")
    assert rng["low"].tolist() == pytest.approx([0.1, 0.5])
    assert rng["high"].tolist() == pytest.approx([0.6, 0.5])
    with pytest.raises(ValueError, match="band"):
        plotting.seed_spread(frame, "x", "v", band="iqr")


def test_shade_spread_clips_to_bounds_and_skips_one_seed():
    plt = plotting.pyplot()
    fig, ax = plt.subplots()
    spread = pd.DataFrame({"x": [1, 2], "n": [3, 3], "mean": [0.9, 0.5], "low": [0.8, 0.2],
                           "high": [1.1, 0.7]})
    plotting.shade_spread(ax, spread, "x", "C0", scale=100, bounds=(0, 1))
    (band,) = _bands(ax)
    assert _band_at(band, 1) == pytest.approx((80, 100))
    assert _band_at(band, 2) == pytest.approx((20, 70))
    plotting.shade_spread(ax, spread.assign(n=1), "x", "C0")
    assert len(_bands(ax)) == 1
    plt.close(fig)


# --- expr ------------------------------------------------------------------------------------

def test_expr_accuracy_by_length_has_a_band_per_split_and_bars_on_the_loss(tmp_path, drawn):
    summary, by_length, data = expr_inputs(tmp_path, THREE)
    expr_figures.render_expr(summary, by_length, data, tmp_path / "plots")
    ax = drawn["accuracy_vs_length.png"].axes[0]
    bands = _bands(ax)
    assert len(bands) == 4  # test and OOD, for each of the two architectures
    # gpt large, length 20: the band is mean ± std of the three seeds' accuracies, in percent.
    acc = [pd.read_csv(by_length / f"gpt-large-{s}.csv").set_index("length").loc[20, "accuracy"]
           for s in THREE]
    lo, hi = np.mean(acc) - np.std(acc, ddof=1), np.mean(acc) + np.std(acc, ddof=1)
    expected = (100 * max(lo, 0), 100 * min(hi, 1))
    assert any(np.allclose(_band_at(b, 20), expected) for b in bands
               if np.isclose(b[:, 0], 20).any())
    assert "mean ± std over 3 seeds" in _title(drawn["accuracy_vs_length.png"])
    loss = drawn["val_loss_vs_params.png"]
    bars = _bars(loss.axes[0])
    assert len(bars) == 2 and sum(len(b) for b in bars) == 4  # one bar per (model, size)
    assert "mean ± std over 3 seeds" in _title(loss)


def _line(ax, label: str):
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return line


def test_expr_size_figures_draw_each_configurations_mean_at_its_parameter_count(tmp_path, drawn):
    summary, by_length, data = expr_inputs(tmp_path, THREE)
    expr_figures.render_expr(summary, by_length, data, tmp_path / "plots")
    means = summary.groupby(["model", "size"]).agg(params=("params", "mean"),
                                                   acc=("test_acc", "mean"),
                                                   loss=("best_val_loss", "mean"))
    for name, column, scale in (("accuracy_vs_params.png", "acc", 100),
                                ("val_loss_vs_params.png", "loss", 1)):
        ax = drawn[name].axes[0]
        for model, label in (("gpt", "GPT"), ("lstm", "LSTM")):
            line = _line(ax, label)
            expected = means.loc[model].sort_values("params")
            assert np.allclose(line.get_xdata(), expected["params"]), (name, model)
            assert np.allclose(line.get_ydata(), scale * expected[column]), (name, model)


def test_expr_length_distribution_draws_each_splits_shares(tmp_path, drawn):
    summary, by_length, data = expr_inputs(tmp_path, THREE)
    expr_figures.render_expr(summary, by_length, data, tmp_path / "plots")
    ax = drawn["length_distribution.png"].axes[0]
    lengths = pd.read_csv(data / "lengths.csv")
    for split, rows in lengths.groupby("split"):
        (line,) = [ln for ln in ax.get_lines() if ln.get_label().startswith(f"{split} (")]
        assert f"({int(rows['count'].sum()):,} problems)" in line.get_label()
        assert np.allclose(line.get_xdata(), rows.sort_values("length")["length"])
        assert np.allclose(line.get_ydata(), rows.sort_values("length")["percent"])


def test_expr_accuracy_by_length_keeps_its_legend_and_title_inside_the_figure(tmp_path, drawn):
    """The legend below the axes, clear of the lines and of the band's label; the title and the
    legend within the saved image."""
    summary, by_length, data = expr_inputs(tmp_path, THREE)
    expr_figures.render_expr(summary, by_length, data, tmp_path / "plots")
    fig = drawn["accuracy_vs_length.png"]
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)   # the saved figure was closed: draw it again to measure it
    canvas.draw()
    renderer = canvas.get_renderer()
    page = fig.bbox
    legend, axes = fig.legends[0].get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.y1 <= axes.y0 + 1
    for part in (legend, ax.title.get_window_extent(renderer)):
        assert page.x0 - 1 <= part.x0 and part.x1 <= page.x1 + 1, part


def test_expr_one_seed_draws_no_band(tmp_path, drawn):
    summary, by_length, data = expr_inputs(tmp_path, ONE)
    paths = expr_figures.render_expr(summary, by_length, data, tmp_path / "plots")
    assert all(p.is_file() for p in paths)
    for name in ("accuracy_vs_length.png", "val_loss_vs_params.png", "accuracy_vs_params.png"):
        assert not _bands(drawn[name].axes[0]) and not _bars(drawn[name].axes[0]), name
        assert "one seed" in _title(drawn[name])


# --- abacus ----------------------------------------------------------------------------------

def test_abacus_bars_per_cell_and_mean_heatmaps(tmp_path, drawn):
    summary, eval_dir, data_dir = abacus_inputs(tmp_path, THREE)
    paths = abacus_looped_figures.render_abacus(summary, eval_dir, data_dir, tmp_path / "plots")
    heatmaps = sorted(p.name for p in paths if p.parent.name == "heatmaps")
    assert heatmaps == sorted([f"abacus-{s}-{seed}.png" for s in ("l2r2", "l4r4") for seed in THREE]
                              + ["abacus-l2r2-mean.png", "abacus-l4r4-mean.png"])
    assert all(p.is_file() for p in paths)
    assert "mean over 3 seeds" in _title(drawn["abacus-l2r2-mean.png"])
    # The mean grid is the mean of the seeds' grids, cell by cell.
    grids = [pd.read_csv(eval_dir / f"abacus-l2r2-{s}.csv") for s in THREE]
    mean = abacus_looped_figures.mean_grid(grids).set_index(["recurrences", "n1", "n2"])["accuracy"]
    expected = sum(g.set_index(["recurrences", "n1", "n2"])["accuracy"] for g in grids) / 3
    pd.testing.assert_series_equal(mean.sort_index(), expected.sort_index(), check_names=False)
    # Accuracy over the whole grid (left: what the ledger's tests read) and beyond training
    # (right) at each recurrence count for l2r2: a faint line per seed, and the mean over them
    # bold; no band to clip at 100 %.
    fig = drawn["ood_vs_recurrences.png"]
    grid_max = json.loads((data_dir / "meta.json").read_text())["grid_max"]
    for ax, keep in ((fig.axes[0], lambda g: (g["n1"] <= grid_max) & (g["n2"] <= grid_max)),
                     (fig.axes[1], lambda g: ((g["n1"] > 4) | (g["n2"] > 4))
                      & (g["n1"] <= grid_max) & (g["n2"] <= grid_max))):
        per_seed = {s: g[keep(g)].groupby("recurrences")["accuracy"].mean()
                    for s, g in zip(THREE, grids)}
        lines = [(tuple(ln.get_xdata()), tuple(ln.get_ydata())) for ln in ax.get_lines()]
        for s, series in per_seed.items():
            assert any(x == tuple(series.index) and np.allclose(y, 100 * series.values)
                       for x, y in lines), s
        mean = sum(per_seed.values()) / 3
        assert any(np.allclose(y, 100 * mean.values) and x == tuple(mean.index) for x, y in lines)
        assert not _bars(ax)
    assert "the whole grid" in fig.axes[0].get_title()
    assert "beyond 4 digits" in fig.axes[1].get_title()
    assert "faint: each seed; bold: their mean" in _title(fig)
    # no structure takes the colours that mean GPT and LSTM elsewhere
    colours = {ln.get_color() for ax in fig.axes for ln in ax.get_lines()}
    assert not colours & {"#1f77b4", "#ff7f0e"}


def test_abacus_one_seed_keeps_its_cells_only(tmp_path, drawn):
    summary, eval_dir, data_dir = abacus_inputs(tmp_path, ONE)
    paths = abacus_looped_figures.render_abacus(summary, eval_dir, data_dir, tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["abacus-l2r2-0.png", "abacus-l4r4-0.png",
                                             "ood_vs_recurrences.png"]
    assert not _bars(drawn["ood_vs_recurrences.png"].axes[0])
    labels = [t.get_text() for t in drawn["ood_vs_recurrences.png"].axes[0].get_legend().get_texts()]
    assert "abacus l2r2: one seed" in labels


# --- looped ----------------------------------------------------------------------------------

def test_looped_bands_exact_and_per_digit_accuracy(tmp_path, drawn):
    summary, eval_dir, data_dir = looped_inputs(tmp_path, THREE)
    abacus_looped_figures.render_looped(summary, eval_dir, data_dir, tmp_path / "plots")
    fig = drawn["accuracy_vs_digits.png"]
    bands = _bands(fig.axes[0])
    assert len(bands) == 4  # exact match and per digit, for each model
    runs = [pd.read_csv(eval_dir / f"standard-small-{s}.csv").set_index("digits") for s in THREE]
    for metric in ("accuracy", "digit_acc"):
        v = [r.loc[15, metric] for r in runs]
        lo, hi = np.mean(v) - np.std(v, ddof=1), np.mean(v) + np.std(v, ddof=1)
        expected = (100 * max(lo, 0), 100 * min(hi, 1))
        assert any(np.allclose(_band_at(b, 15), expected) for b in bands), metric
    assert "mean ± std over 3 seeds" in _title(fig)


def test_looped_one_seed_draws_no_band(tmp_path, drawn):
    summary, eval_dir, data_dir = looped_inputs(tmp_path, ONE)
    abacus_looped_figures.render_looped(summary, eval_dir, data_dir, tmp_path / "plots")
    assert not _bands(drawn["accuracy_vs_digits.png"].axes[0])
    assert "one seed" in _title(drawn["accuracy_vs_digits.png"])


# --- modular ---------------------------------------------------------------------------------

def test_modular_sanity_draws_each_seed_and_their_median(tmp_path, drawn):
    summary, out = modular_inputs(tmp_path, THREE)
    modular_figures.render_modular(summary, None, None, out)
    fig = drawn["sanity_curves.png"]
    gpt_loss, _, gpt_acc, _ = fig.axes   # a column per model: loss above accuracy
    runs = [pd.read_csv(out / "curves" / "sanity" / f"gpt-sin-sanity-{s}.csv") for s in THREE]
    for ax, metric, scale in ((gpt_acc, "train_acc", 100), (gpt_loss, "val_loss", 1)):
        faint = [ln for ln in ax.get_lines() if ln.get_alpha() == 0.35]
        for run in runs:   # each seed, accuracy in %
            assert any(len(ln.get_ydata()) == len(run)
                       and np.allclose(ln.get_ydata(), scale * run[metric]) for ln in faint)
        # bold: the median over the seeds at each step, which one seed's collapse cannot drag
        median = pd.concat(runs).groupby("step")[metric].median()
        bold = [ln for ln in ax.get_lines() if ln.get_linewidth() == 2]
        assert any(np.allclose(ln.get_ydata(), scale * median.to_numpy()) for ln in bold), metric
        assert not _bands(ax)
    assert len([ln for ln in gpt_acc.get_lines() if ln.get_alpha() == 0.35]) == 2 * len(THREE)
    assert gpt_acc.get_ylabel() == "accuracy, whole answer right (%)"
    assert "nats per answer token" in gpt_loss.get_ylabel()
    assert "faint: each seed" in _title(fig) and "median" in _title(fig)


def test_modular_sanity_one_seed_draws_no_band(tmp_path, drawn):
    summary, out = modular_inputs(tmp_path, ONE)
    modular_figures.render_modular(summary, None, None, out)
    fig = drawn["sanity_curves.png"]
    assert not any(_bands(ax) for ax in fig.axes)
    assert not any(ln.get_alpha() == 0.35 for ax in fig.axes for ln in ax.get_lines())
    assert "one seed" in _title(fig)


# --- charlm ----------------------------------------------------------------------------------

def corpus(tmp_path, source="python-docs", path=None):
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "meta.json").write_text(json.dumps({"source": source, "path": path}))
    return tmp_path / "data"


def test_charlm_validation_band_per_run(tmp_path, drawn):
    summary, out = charlm_inputs(tmp_path, THREE)
    charlm_figures.render_charlm(summary, None, corpus(tmp_path), out, tmp_path / "runs")
    fig = drawn["loss_curves.png"]
    assert [len(_bands(ax)) for ax in fig.axes] == [2, 2]  # a band per model, per seq_length
    live = tmp_path / "runs" / "charlm"
    v = [pd.read_csv(live / f"gru-s64-{s}" / "live/plots/metrics/val/loss.tsv", sep="\t")
         .set_index("step").loc[200, "loss"] / math.log(2) for s in THREE]   # in bits
    expected = (np.mean(v) - np.std(v, ddof=1), np.mean(v) + np.std(v, ddof=1))
    assert any(np.allclose(_band_at(b, 200), expected) for b in _bands(fig.axes[1]))
    assert "mean over 3 seeds" in _title(fig) and "± sample std" in _title(fig)
    assert "charlm on Python's documentation: bits per character" in _title(fig)
    for ax in fig.axes:   # each panel's legend: its runs, the final loss as mean ± std
        assert any("±" in t.get_text() for t in ax.get_legend().get_texts())
    assert not fig.legends


def test_charlm_one_seed_draws_no_band(tmp_path, drawn):
    summary, out = charlm_inputs(tmp_path, ONE)
    charlm_figures.render_charlm(summary, None, corpus(tmp_path, "file", "/x/stories.txt"), out,
                                 tmp_path / "runs")
    fig = drawn["loss_curves.png"]
    assert not any(_bands(ax) for ax in fig.axes)
    assert "±" not in _title(fig) and "charlm on stories.txt" in _title(fig)


def test_charlm_keeps_a_models_colour_whichever_models_ran(tmp_path, drawn):
    summary, out = charlm_inputs(tmp_path, ONE)
    colours = []
    for shown in (summary, summary[summary["model"] != "gru"]):
        charlm_figures.render_charlm(shown, None, corpus(tmp_path), out, tmp_path / "runs")
        colours.append({ln.get_label().split()[0]: ln.get_color()
                        for ln in drawn["loss_curves.png"].axes[0].get_lines()
                        if ln.get_label().endswith(": train")})
    assert set(colours[0]) == {"gru", "transformer-1"} and set(colours[1]) == {"transformer-1"}
    assert colours[0]["transformer-1"] == colours[1]["transformer-1"] != colours[0]["gru"]
