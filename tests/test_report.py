"""Tables and figures from synthetic run records: values, ordering, formatting, atomic writes."""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest

from arithrepro.report import (expr_figures, figures, modular_figures, modular_tables, plotting,
                               tables)
from arithrepro.tasks.declared import Report

# Listed in size order; the file names sort large < medium < small, so an ordering that
# follows file or alphabetical order fails the tests.
PARAMS = {
    "gpt": {"small": 39_328, "medium": 151_040, "large": 1_204_224},
    "lstm": {"small": 9_100, "medium": 35_700, "large": 291_000},
    "retran": {"small": 12_400, "medium": 48_200, "large": 352_000},
}
SEEDS = (0, 1)
# Provenance blocks, cut to what the tables read (arithrepro.provenance writes more).
GPU_RUN = {"commit": "ab" * 20, "dirty": False, "versions": {"torch": "2.13.0"}, "cpu": "AMD EPYC",
           "cpu_capability": "AVX2", "device": "cuda", "gpu": "NVIDIA H100", "threads": 8,
           "precision": "bf16", "params_sha256": "0" * 64}
LAPTOP = {**GPU_RUN, "cpu": "Apple M2", "cpu_capability": "DEFAULT", "device": "cpu", "gpu": None,
          "threads": 4, "precision": "fp32"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _record(model: str, size: str, seed: int) -> dict:
    i = list(PARAMS).index(model) * 3 + list(PARAMS[model]).index(size)
    return {"task": "expr", "model": model, "size": size, "seed": seed,
            "params": PARAMS[model][size],
            "test_acc": 0.2 + 0.05 * i + 0.013 * seed, "ood_acc": 0.01 * i + 0.004 * seed,
            "best_val_loss": 0.9 / (1 + i) + 0.0123 * seed,
            "train_seconds": 40.0 + 7 * i + 3.3 * seed, "steps": 312,
            "tokens_per_s": 120_000.0 + 1_000 * seed,
            # seed 1 trained on a GPU and was scored on a laptop; seed 0 predates provenance
            **({"provenance": {"train": GPU_RUN, "evaluate": LAPTOP}} if seed == 1 else {})}


def _records() -> list[dict]:
    runs = [_record(m, s, seed) for m in PARAMS for s in PARAMS[m] for seed in SEEDS]
    # An architecture unknown to the figures, trained with one seed, with a gap in its metrics.
    runs.append({"task": "expr", "model": "mamba", "size": "small", "seed": 0, "params": 20_000,
                 "test_acc": 0.333, "ood_acc": float("nan"), "best_val_loss": 0.5,
                 "train_seconds": 12.6, "steps": 312, "tokens_per_s": 99_000.0})
    return runs


# A second task with metrics of its own: nothing may assume expr's metric names.
OTHER = {"task": "other", "model": "gpt", "size": "small", "seed": 3, "params": 1_000,
         "val_ppl": 3.25, "exact": 0.5}


def _write_records(metrics_dir: Path, records: list[dict]) -> None:
    for r in records:
        path = metrics_dir / r["task"] / "runs" / f"{r['model']}-{r['size']}-{r['seed']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(r))


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Path:
    d = tmp_path / "metrics"
    _write_records(d, [*_records(), OTHER])
    return d


@pytest.fixture
def runs(metrics_dir: Path) -> pd.DataFrame:
    return tables.collect_runs(metrics_dir, ["expr", "other"])


def _cell(r: dict) -> str:
    return f"{r['model']}-{r['size']}-{r['seed']}"


def _metrics(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in tables.KEYS and k != "provenance"
            and not (isinstance(v, float) and math.isnan(v))}


# --- tables ------------------------------------------------------------------------------

def test_collect_runs_has_one_row_per_record_keys_first(runs):
    assert len(runs) == len(_records()) + 1
    assert list(runs.columns[:4]) == ["task", "model", "size", "seed"]
    assert {"params", "test_acc", "val_ppl"} <= set(runs.columns)


def test_summary_json_holds_every_run_with_its_metrics(runs):
    summary = tables.summary_json(runs)
    assert list(summary) == ["expr", "other"]
    expected = {_cell(r): _metrics(r) for r in _records()}
    assert summary["expr"] == expected
    assert summary["other"] == {"gpt-small-3": _metrics(OTHER)}
    # Another task's metrics and NaN are left out, not written as null or NaN.
    assert "val_ppl" not in summary["expr"]["gpt-small-0"]
    assert "ood_acc" not in summary["expr"]["mamba-small-0"]
    assert type(summary["expr"]["gpt-small-0"]["params"]) is int
    assert type(summary["expr"]["gpt-small-0"]["steps"]) is int
    json.dumps(summary, allow_nan=False)


def test_summary_csv_sorts_sizes_by_params_not_by_name(runs):
    order = list(tables.summary_csv(runs)[["task", "model", "size", "seed"]]
                 .itertuples(index=False, name=None))
    expected = [("expr", m, s, seed) for m in ["gpt", "lstm"] for s in PARAMS[m] for seed in SEEDS]
    expected += [("expr", "mamba", "small", 0)]
    expected += [("expr", "retran", s, seed) for s in PARAMS["retran"] for seed in SEEDS]
    expected += [("other", "gpt", "small", 3)]
    assert order == expected


def test_summary_csv_ends_with_the_trainings_provenance_and_the_metrics_leave_it_out(
        runs, metrics_dir):
    assert list(runs.columns[-len(tables.PROVENANCE):]) == tables.PROVENANCE
    assert not set(tables.PROVENANCE) & set(tables.metric_names(runs))
    rows = tables.summary_csv(runs).set_index(["model", "size", "seed"])
    assert rows.loc[("gpt", "small", 1), ["commit", "machine", "cpu_capability", "threads",
                                          "precision"]].tolist() == \
        ["ab" * 20, "NVIDIA H100", "AVX2", 8, "bf16"]  # the training's, not the laptop's
    assert rows.loc[("gpt", "small", 0), ["commit", "machine"]].isna().all()
    tables.write_all(metrics_dir, ["expr", "other"])
    csv = pd.read_csv(metrics_dir / "summary.csv")
    assert len(csv.columns) == len(runs.columns)  # a few columns, not the block flattened
    assert "AVX2" not in (metrics_dir / "summary.json").read_text()
    assert "commit" not in (metrics_dir / "expr.md").read_text()


def _table(md: str) -> tuple[list[str], list[list[str]]]:
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert all(ln.endswith("|") for ln in lines)
    assert len({ln.count("|") for ln in lines}) == 1
    assert re.fullmatch(r"\|( :?-{3,}:? \|)+", lines[1])
    split = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return split[0], split[2:]


def test_markdown_reports_true_mean_and_std_over_seeds(runs):
    md = tables.markdown_table(runs, "expr", ["test_acc", "best_val_loss", "train_seconds"])
    assert md.startswith("### expr\n")
    header, rows = _table(md)
    assert header == ["model", "size", "params", "seeds", "test_acc", "best_val_loss",
                      "train_seconds"]
    row = {(r[0], r[1]): dict(zip(header, r)) for r in rows}["gpt", "medium"]
    seeds = [_record("gpt", "medium", s) for s in SEEDS]
    acc = [100 * r["test_acc"] for r in seeds]
    loss = [r["best_val_loss"] for r in seeds]
    secs = [r["train_seconds"] for r in seeds]
    assert row["params"] == "151,040"
    assert row["seeds"] == "2"
    # Each shown number is the true statistic, rounded to the displayed precision.
    assert _stat(row["test_acc"], " %") == pytest.approx(
        (statistics.mean(acc), statistics.stdev(acc)), abs=0.05 + 1e-9)
    assert re.fullmatch(r"\d+\.\d \u00b1 \d+\.\d %", row["test_acc"])
    assert _stat(row["best_val_loss"], "") == pytest.approx(
        (statistics.mean(loss), statistics.stdev(loss)), rel=5e-4)
    assert all(_significant_digits(x) == 4 for x in row["best_val_loss"].split(" \u00b1 "))
    assert _stat(row["train_seconds"], " s") == pytest.approx(
        (statistics.mean(secs), statistics.stdev(secs)), abs=0.5 + 1e-9)
    assert re.fullmatch(r"\d+ \u00b1 \d+ s", row["train_seconds"])


def _stat(text: str, unit: str) -> tuple[float, float]:
    assert text.endswith(unit)
    mean, std = text.removesuffix(unit).split(" \u00b1 ")
    return float(mean), float(std)


def _significant_digits(number: str) -> int:
    return len(number.replace(".", "").lstrip("0"))


def test_markdown_rows_by_model_then_params(runs):
    _, rows = _table(tables.markdown_table(runs, "expr", ["test_acc"]))
    expected = [(m, s) for m in ["gpt", "lstm"] for s in PARAMS[m]] + [("mamba", "small")]
    expected += [("retran", s) for s in PARAMS["retran"]]
    assert [(r[0], r[1]) for r in rows] == expected


def test_markdown_single_seed_shows_value_alone(runs):
    header, rows = _table(tables.markdown_table(runs, "expr", ["test_acc", "ood_acc"]))
    row = dict(zip(header, next(r for r in rows if r[0] == "mamba")))
    assert row["seeds"] == "1"
    assert row["test_acc"] == "33.3 %"
    assert "±" not in row["test_acc"]
    assert row["ood_acc"] == "–"  # its only value is NaN


def test_default_metrics_put_common_ones_first_and_keep_new_ones(runs):
    assert tables.default_metrics(runs, "expr") == [
        "test_acc", "ood_acc", "best_val_loss", "train_seconds", "steps", "tokens_per_s"]
    assert tables.default_metrics(runs, "other") == ["val_ppl", "exact"]


@pytest.mark.parametrize("name, text", [
    ("gpt-small-0.json", "{not json"),
    ("gpt-small-0.json", "[1, 2]"),
    ("gpt-small-0.json", json.dumps({"task": "expr", "model": "gpt", "size": "small"})),
    ("gpt-small-0.json", json.dumps({**_record("gpt", "small", 0), "test_acc": "high"})),
    ("gpt-small-0.json", json.dumps({**_record("gpt", "small", 0), "test_acc": 41.3})),
    ("gpt-small-7.json", json.dumps(_record("gpt", "small", 0))),
    ("gpt-small-0.json", json.dumps({**_record("gpt", "small", 0), "provenance": "laptop"})),
])
def test_malformed_record_names_its_file(tmp_path, name, text):
    _write_records(tmp_path, [_record("lstm", "small", 0)])
    bad = tmp_path / "expr" / "runs" / name
    bad.write_text(text)
    with pytest.raises(ValueError) as err:
        tables.collect_runs(tmp_path, ["expr"])
    assert str(bad) in str(err.value)
    assert "\n" not in str(err.value)


def test_task_without_runs_is_an_error(metrics_dir):
    with pytest.raises(ValueError, match="'absent'"):
        tables.collect_runs(metrics_dir, ["expr", "absent"])


def test_headline_is_mean_and_std_over_seeds_of_the_chosen_metrics(runs):
    headline = tables.headline_json(runs, {"expr": Report(("test_acc", "ood_acc"), "^(small|large)$"),
                                           "other": Report(("exact",))})
    expr = headline["expr"]
    assert set(expr) == {f"{m}-{s}" for m in PARAMS for s in ("small", "large")} | {"mamba-small"}
    seeds = [_record("lstm", "large", seed)["test_acc"] for seed in SEEDS]
    assert expr["lstm-large"]["test_acc"] == pytest.approx(sum(seeds) / 2)
    assert expr["lstm-large"]["test_acc_std"] == pytest.approx(abs(seeds[1] - seeds[0]) / 2 ** 0.5)
    assert set(expr["gpt-small"]) == {"test_acc", "test_acc_std", "ood_acc", "ood_acc_std"}
    # one seed: no std; a metric the cell lacks (NaN): left out
    assert expr["mamba-small"] == {"test_acc": 0.333}
    assert headline["other"] == {"gpt-small": {"exact": 0.5}}
    assert tables.headline_json(runs, {}) == {}


def test_write_all_writes_every_file_atomically(metrics_dir, runs):
    line = tables.write_all(metrics_dir, ["expr", "other"], {"expr": Report(("test_acc",))})
    assert line.startswith(f"{len(runs)} runs, 2 tasks -> ")
    assert "\n" not in line
    names = ["headline.json", "summary.json", "summary.csv", "expr.md", "other.md"]
    for name in names:
        assert str(metrics_dir / name) in line
    assert json.loads((metrics_dir / "summary.json").read_text()) == tables.summary_json(runs)
    assert set(json.loads((metrics_dir / "headline.json").read_text())["expr"]["gpt-small"]) == {
        "test_acc", "test_acc_std"}
    csv = pd.read_csv(metrics_dir / "summary.csv")
    assert len(csv) == len(runs)
    assert "val_ppl" in (metrics_dir / "other.md").read_text()
    assert sorted(p.name for p in metrics_dir.iterdir() if p.is_file()) == sorted(names)


# --- figures -----------------------------------------------------------------------------

def _by_length(r: dict) -> pd.DataFrame:
    rows = []
    for split, lengths in (("test", range(8, 31)), ("ood", range(31, 41))):
        for length in lengths:
            correct = max(0, round(100 * r["test_acc"]) - 2 * (length - 8) - r["seed"])
            rows.append({"split": split, "length": length, "n": 100, "correct": correct,
                         "accuracy": correct / 100})
    return pd.DataFrame(rows)


def _lengths() -> pd.DataFrame:
    rows = []
    for split, total, lengths in (("train", 8000, range(8, 31)), ("valid", 1000, range(8, 31)),
                                  ("test", 1000, range(8, 31)), ("ood", 1000, range(31, 41))):
        weights = [1 + min(n - lengths[0], lengths[-1] - n) for n in lengths]
        counts = [total * w // sum(weights) for w in weights]
        rows += [{"split": split, "length": n, "count": c, "percent": 100 * c / sum(counts)}
                 for n, c in zip(lengths, counts)]
    return pd.DataFrame(rows)


def _figure_inputs(root: Path) -> tuple[pd.DataFrame, Path, Path]:
    _write_records(root / "metrics", _records())
    df = tables.collect_runs(root / "metrics", ["expr"])
    summary = tables.summary_csv(df)   # as the report stage passes them
    by_length = root / "by_length"
    by_length.mkdir()
    for r in _records():
        _by_length(r).to_csv(by_length / f"{_cell(r)}.csv", index=False)
    lengths = root / "lengths.csv"
    _lengths().to_csv(lengths, index=False)
    return summary, by_length, root


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[list[Path], Path]:
    root = tmp_path_factory.mktemp("figures")
    summary, by_length, lengths = _figure_inputs(root)
    out = root / "plots"
    return expr_figures.render_expr(summary, by_length, lengths, out), out


def test_figures_are_png_files(rendered):
    paths, out = rendered
    assert [p.name for p in paths] == ["accuracy_vs_params.png", "accuracy_vs_length.png",
                                       "val_loss_vs_params.png", "length_distribution.png"]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE), path
        assert len(data) > 20_000, path


def test_figures_leave_no_temporary_files(rendered):
    paths, out = rendered
    assert sorted(out.iterdir()) == sorted(paths)


@pytest.mark.parametrize("missing", ["by_length/retran-large-1.csv", "lengths.csv"])
def test_figures_missing_input_names_the_file(tmp_path, missing):
    summary, by_length, lengths = _figure_inputs(tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / missing))):
        expr_figures.render_expr(summary, by_length, lengths, tmp_path / "plots")
    assert not (tmp_path / "plots").exists()


def test_architecture_colours_do_not_depend_on_the_subset_drawn():
    everyone = ["gpt", "lstm", "mamba", "retran", "xlstm"]
    for model in ["gpt", "lstm", "retran"]:
        assert plotting.arch_style(model, everyone) == plotting.arch_style(model, [model])
    colours = [plotting.arch_style(m, everyone)["color"] for m in everyone]
    assert len(set(colours)) == len(everyone)
    assert plotting.arch_style("mamba", everyone)["color"] == plotting.OTHER_COLOURS[0]
    known = list(plotting.MODEL_COLOURS.values())
    assert len(set(known)) == len(known) and not set(known) & set(plotting.OTHER_COLOURS)
    assert plotting.arch_order(everyone) == ["gpt", "lstm", "retran", "mamba", "xlstm"]
    assert [plotting.display_name(m) for m in ["gpt", "lstm", "retran", "mamba"]] == [
        "GPT", "LSTM", "ReTran", "mamba"]


def test_registry_maps_expr_to_its_renderer():
    assert figures.FIGURES["expr"].render is expr_figures.render_expr


# --- modular figures and tables ------------------------------------------------------------
# Fake records and curves of every modular study, as train-modular-<study> writes them
# (metrics from the curve by the task's own curve_metrics), two seeds unless asked otherwise.

MODULAR_MODELS = ("gpt-sin", "lstm-std")
MODULAR_BUDGETS = (0.25, 0.5, 1.0)
MODULAR_SWEEPS = {  # study: ({key: values}, what each cell's name shows)
    "sanity": ({}, ""),
    "data": ({"r_train": [0.3, 0.5, 0.7]}, "r{r_train}"),
    "size": ({"layers": [1, 2, 3], "d_model": [64, 128, 256]}, "L{layers}d{d_model}"),
    "compute": ({"batch_size": [32, 128, 512]}, "B{batch_size}"),
    "regularization": ({"weight_decay": [0.25, 1.0]}, "wd{weight_decay}"),
}
MODULAR_BASE = {"p": 31, "r_train": 0.5, "layers": 2, "d_model": 128, "batch_size": 512,
                "weight_decay": 1.0, "steps": 2000, "lr": 1e-3, "beta2": 0.999}


def _modular_curve(model: str, cfg: dict, seed: int) -> pd.DataFrame:
    """Train accuracy rises early, validation later: later for less data, a bigger batch, less
    weight decay, a smaller model, and unevenly per seed."""
    import numpy as np

    steps = np.arange(0, cfg["steps"] + 1, 50)
    jitter = (37 * seed) % 150  # seeds 0, 1, 2, 42: 0, 37, 74, 54 steps later
    lstm = 100 if model.startswith("lstm") else 0
    when = (500 + 400 * (0.7 - cfg["r_train"]) + 150 * math.log2(cfg["batch_size"] / 32)
            - 200 * cfg["weight_decay"] - 60 * cfg["layers"] - 0.8 * cfg["d_model"]
            + 3 * lstm + jitter)
    train = 1 / (1 + np.exp(-(steps - 150 - lstm - jitter / 3) / 40))
    val = 1 / (1 + np.exp(-(steps - max(when, 250)) / 80))
    # accuracies are fractions of a finite set: they reach their best at a step, and stay there
    train_acc, val_acc = np.round(train, 2), np.round(0.97 * val, 2)
    return pd.DataFrame({"step": steps, "epoch": steps // 10,
                         "train_loss": 4.6 * (1 - train) + 1e-3 * (1 + (jitter + lstm) / 50),
                         # overfits late: the best validation loss is not the last
                         "val_loss": 4.6 * (1 - val) + 2e-2 + 0.3 * np.exp(-((steps - 400) / 300) ** 2)
                         + 0.05 * np.clip((steps - when - 600) / 1000, 0, 1),
                         "train_acc": train_acc, "val_acc": val_acc,
                         "param_norm": 40 + 30 * np.exp(-steps * cfg["weight_decay"] / 600) + jitter / 20,
                         "train_margin": 8 * train - 2, "head_norm": 10 + 5 * train,
                         # nothing to compare the first evaluation with
                         "update_norm": np.where(steps == 0, np.nan, 0.5 * np.exp(-steps / 500) + 0.01)})


def modular_inputs(root: Path, seeds=(0, 42)) -> tuple[pd.DataFrame, Path]:
    """metrics/summary.csv's modular rows and plots/modular/curves/<study>/<run>.csv of every
    study; returns (rows, the figures' folder plots/modular)."""
    from arithrepro.tasks.modular import curve_metrics  # imports torch: only where needed

    out, rows = root / "plots" / "modular", []
    for study, (sweep, name) in MODULAR_SWEEPS.items():
        (out / "curves" / study).mkdir(parents=True)
        for model in MODULAR_MODELS:
            for values in itertools.product(*sweep.values()):
                swept = dict(zip(sweep, values))
                cfg = {**MODULAR_BASE, **swept}
                label = study + ("." + name.format(**swept) if swept else "")
                for seed in seeds:
                    curve = _modular_curve(model, cfg, seed)
                    curve.drop(columns="epoch").to_csv(
                        out / "curves" / study / f"{model}-{label}-{seed}.csv", index=False)
                    points = curve.to_dict("records")
                    record = {"task": "modular", "model": model, "size": label, "seed": seed,
                              "params": cfg["layers"] * (8 if model.startswith("lstm") else 12)
                              * cfg["d_model"] ** 2,
                              **cfg,
                              **curve_metrics(points), "param_norm": points[-1]["param_norm"]}
                    for a in MODULAR_BUDGETS if study == "compute" else ():
                        record.update(curve_metrics(points, upto=int(a * cfg["steps"]),
                                                    prefix=f"a{a:g}_"))
                    rows.append(record)
    return pd.DataFrame(rows), out


@pytest.fixture(scope="module")
def modular(tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    return modular_inputs(tmp_path_factory.mktemp("modular"))


def _study(modular, study: str) -> pd.DataFrame:
    return modular_tables.study_rows(modular[0], study)


def _draw(function, *args):
    """The figure a modular figure function draws, in the report's style (closed by the caller)."""
    plt = plotting.pyplot()
    with plt.rc_context(plotting.STYLE):
        fig = function(plt, *args)
        fig.canvas.draw()  # lays it out as saving would: fails on what cannot be drawn
    return plt, fig


def _panels(fig) -> list:
    """The figure's plotting axes, colour bars left out."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def _seed_mean_of(rows: pd.DataFrame, where: dict, column: str) -> float:
    sel = rows
    for k, v in where.items():
        sel = sel[sel[k] == v]
    assert sel["seed"].nunique() == 2
    return float(sel[column].mean())


def _has_line(ax, xs, ys) -> bool:
    import numpy as np

    return any(len(line.get_xdata()) == len(xs)
               and np.allclose(line.get_xdata(), xs) and np.allclose(line.get_ydata(), ys)
               for line in ax.get_lines())


def _bands(ax) -> list:
    from matplotlib.collections import PolyCollection

    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_modular_renders_every_study_figure(modular, monkeypatch):
    rows, out = modular
    saved = []

    def save(plt, fig, path):  # the figures' content is checked below, drawn; not written here
        saved.append(Path(path).name)
        plt.close(fig)
        return path

    monkeypatch.setattr(modular_figures, "save", save)
    written = modular_figures.render_modular(rows, None, None, out)
    names = sorted(p.name for p in written)
    assert names == sorted(saved) == sorted([
        "sanity_curves.png", "sanity_dynamics.png", "data_curves.png", "data_metrics.png", "compute_curves.png",
        "compute_metrics.png", "compute_budgets.png", "regularization_curves.png",
        "regularization_metrics.png", "size_curves.png", "size_metrics.png", "size_params.png"])
    declared = {Path(p).name for p in figures.FIGURES["modular"].writes}
    assert set(names) <= declared  # orders_curves: no orders records here


def test_modular_size_curves_draw_loss_and_accuracy_per_depth(modular):
    rows = _study(modular, "size")
    plt, fig = _draw(modular_figures.size_curves, rows, modular[1] / "curves" / "size")
    panels = _panels(fig)
    assert len(panels) == 2 * 2 * 3  # per model a loss row and an accuracy row, a column per L
    loss = [ax for ax in panels if ax.get_title().endswith(": loss")]
    acc = [ax for ax in panels if ax.get_title().endswith(": accuracy")]
    assert len(loss) == len(acc) == 6
    assert all(ax.get_yscale() == "log" for ax in loss)
    assert all(ax.get_yscale() == "linear" for ax in acc)
    # 3 widths x (train, val) lines and as many ± std bands in each panel
    assert all(len(ax.get_lines()) == 6 and len(_bands(ax)) == 6 for ax in panels)
    assert "band ± 1 std" in fig._suptitle.get_text()
    plt.close(fig)


# the y labels of the source's four quantities, each drawn for train and val
QUANTITY_LABELS = ["lowest loss, L (nats per answer token, log scale)", "highest accuracy, A (%)",
                   "step of the lowest loss, t_f(L)", "first step at the highest accuracy, t_f(A)"]


def test_modular_size_metrics_draw_the_eight_metrics_against_d_and_L(modular):
    rows = _study(modular, "size")
    plt, fig = _draw(modular_figures.size_metrics, rows)
    axes = _panels(fig)
    assert len(axes) == 16  # a row per quantity; train and val against d, train and val against L
    grid = [axes[4 * r:4 * r + 4] for r in range(4)]
    assert [row[0].get_ylabel() for row in grid] == QUANTITY_LABELS
    assert all(ax.get_yscale() == "log" for ax in grid[0])
    assert [ax.get_xlabel() for ax in grid[0]] == ["width d", "width d", "layers L", "layers L"]
    # t_f(L_val) against d for the LSTM at L = 3, and t_f(L_train) against L for the GPT at d = 64
    lstm = [_seed_mean_of(rows, {"model": "lstm-std", "layers": 3, "d_model": d}, "val_loss_step")
            for d in (64, 128, 256)]
    assert _has_line(grid[2][1], [64, 128, 256], lstm)
    gpt = [_seed_mean_of(rows, {"model": "gpt-sin", "layers": L, "d_model": 64}, "train_loss_step")
           for L in (1, 2, 3)]
    assert _has_line(grid[2][2], [1, 2, 3], gpt)
    budget = lambda ax: [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]  # noqa: E731
    assert all(len(ax.get_lines()) - len(budget(ax)) == 6 for ax in axes)  # 2 models x 3 lines
    # the t_f panels mark the step budget: a t_f on it is a minimum not yet reached
    steps = rows["steps"].unique()
    assert all([ln.get_ydata()[0] for ln in budget(ax)] == list(steps)
               for ax in grid[2] + grid[3])
    assert not any(budget(ax) for ax in grid[0] + grid[1])
    assert len(fig.legends) == 2
    plt.close(fig)


def test_modular_size_params_is_its_own_figure_of_the_eight_metrics(modular):
    rows = _study(modular, "size")
    plt, fig = _draw(modular_figures.size_params, rows)
    axes = _panels(fig)
    assert len(axes) == 8
    assert [ax.get_ylabel() for ax in axes] == QUANTITY_LABELS * 2
    assert [ax.get_title() for ax in axes] == ["train"] * 4 + ["val"] * 4
    assert all(ax.get_xscale() == "log" for ax in axes)
    assert axes[4].get_yscale() == "log" and axes[5].get_yscale() == "linear"
    # a point per (model, L, d)
    assert all(sum(len(c.get_offsets()) for c in ax.collections) == 18 for ax in axes)
    plt.close(fig)


def test_modular_compute_budgets_draw_the_eight_metrics_per_budget(modular):
    rows = _study(modular, "compute")
    budgets = modular_tables.budgets_of(rows)
    assert budgets == list(MODULAR_BUDGETS)
    plt, fig = _draw(modular_figures.compute_budgets, rows, budgets)
    axes = _panels(fig)
    assert len(axes) == 16  # a row per quantity, a column per (model, split)
    grid = [axes[4 * r:4 * r + 4] for r in range(4)]
    assert [row[0].get_ylabel() for row in grid] == QUANTITY_LABELS
    assert [ax.get_title() for ax in grid[0]] == ["GPT, train", "GPT, val", "LSTM, train", "LSTM, val"]
    assert all(ax.get_yscale() == "log" for ax in grid[0])
    assert all(len(ax.get_lines()) == len(budgets) for ax in axes)
    for r, column in ((0, "a0.25_train_loss"), (3, "a0.5_train_acc_step")):
        ys = [_seed_mean_of(rows, {"model": "gpt-sin", "batch_size": b}, column) for b in (32, 128, 512)]
        assert _has_line(grid[r][0], [32, 128, 512], ys), column
    ys = [_seed_mean_of(rows, {"model": "lstm-std", "batch_size": b}, "a1_val_loss_step")
          for b in (32, 128, 512)]
    assert _has_line(grid[2][3], [32, 128, 512], ys)
    assert any(ax.get_label() == "<colorbar>" and "budget α" in ax.get_ylabel() for ax in fig.axes)
    plt.close(fig)


def test_modular_metrics_vs_draws_the_step_of_best_loss(modular):
    rows = _study(modular, "data")
    plt, fig = _draw(modular_figures.metrics_vs, rows, "r_train", False, "data")
    axes = _panels(fig)
    assert sorted(ax.get_ylabel() for ax in axes) == sorted(QUANTITY_LABELS)
    by = {ax.get_ylabel(): ax for ax in axes}
    assert by[QUANTITY_LABELS[0]].get_yscale() == "log"
    step = by["step of the lowest loss, t_f(L)"]
    for model in MODULAR_MODELS:
        for split in ("train", "val"):
            ys = [_seed_mean_of(rows, {"model": model, "r_train": r}, f"{split}_loss_step")
                  for r in (0.3, 0.5, 0.7)]
            assert _has_line(step, [0.3, 0.5, 0.7], ys), (model, split)
    plt.close(fig)


@pytest.mark.parametrize("study, key, norm", [("data", "r_train", False),
                                              ("compute", "batch_size", False),
                                              ("regularization", "weight_decay", True)])
def test_modular_swept_curves_band_one_sample_std(modular, study, key, norm):
    import numpy as np

    rows = _study(modular, study)
    curve_dir = modular[1] / "curves" / study
    plt, fig = _draw(modular_figures.swept_curves, rows, curve_dir, key, key == "batch_size",
                     study, norm)
    axes = _panels(fig)
    assert all(_bands(ax) for ax in axes)
    loss = axes[0]  # the first model's loss panel
    assert loss.get_yscale() == "log"
    n = len(rows[rows["model"] == "gpt-sin"][key].unique())
    assert len(_bands(loss)) == 2 * n  # train and val per swept value
    label = rows[rows["model"] == "gpt-sin"]["size"].iloc[0]
    runs = [pd.read_csv(curve_dir / f"gpt-sin-{label}-{s}.csv").set_index("step") for s in (0, 42)]
    v = np.log10([r.loc[500, "val_loss"] for r in runs])   # the loss panel is log scale
    expected = 10 ** np.array([np.mean(v) - np.std(v, ddof=1), np.mean(v) + np.std(v, ddof=1)])
    assert any(np.allclose(_band_at(b.get_paths()[0].vertices, 500), expected)
               for b in _bands(loss))
    assert "band ± 1 std" in fig._suptitle.get_text()
    legend = [t.get_text() for t in axes[1].get_legend().get_texts()]
    assert "± 1 std over seeds" in legend
    plt.close(fig)


def _band_at(vertices, x: float) -> tuple[float, float]:
    import numpy as np

    ys = vertices[np.isclose(vertices[:, 0], x), 1]
    return ys.min(), ys.max()


def test_modular_swept_curves_one_seed_draw_no_band(tmp_path):
    rows, out = modular_inputs(tmp_path, seeds=(0,))
    rows = modular_tables.study_rows(rows, "data")
    plt, fig = _draw(modular_figures.swept_curves, rows, out / "curves" / "data", "r_train", False,
                     "data")
    assert not any(_bands(ax) for ax in _panels(fig))
    assert "one seed" in fig._suptitle.get_text() and "±" not in fig._suptitle.get_text()
    plt.close(fig)


def test_modular_budget_tables_cover_the_eight_metrics(modular):
    rows = modular[0]
    md, tex = modular_tables.write(rows).values()
    titles = re.findall(r"^### compute: (\S+) within the first α·T steps", md, flags=re.M)
    assert titles == ["L_train", "L_val", "A_train", "A_val",
                      "t_f(L_train)", "t_f(L_val)", "t_f(A_train)", "t_f(A_val)"]
    assert tex.count("tab:modular-compute-budgets") == 8
    section = md.split("### compute: t_f(A_val) within")[1].split("\n#")[0]
    lines = [[c.strip() for c in ln.strip("|").split("|")] for ln in section.splitlines()
             if ln.startswith("|")]
    header, body = lines[0], lines[2:]
    assert header == ["model", "B", "α = 0.25", "α = 0.5", "α = 1"]
    assert len(body) == 2 * 3  # a row per (model, B)
    row = {(r[0], r[1]): r for r in body}[("lstm-std", "128")]
    values = [float(v) for v in rows[(rows["size"] == "compute.B128")
                                     & (rows["model"] == "lstm-std")]["a1_val_acc_step"]]
    assert statistics.stdev(values) > 0
    assert _stat(row[4].strip("*"), "") == pytest.approx(
        (statistics.fmean(values), statistics.stdev(values)), rel=1e-4)   # as printed
    # per model and budget, the earliest t_f in bold: the smallest batch (it generalizes first)
    for model in MODULAR_MODELS:
        full = [r for r in body if r[0] == model]
        assert [r[4].startswith("**") for r in full] == [True, False, False], model
    assert "(per model and α, the batch size with the earliest mean in bold)" in section.split("\n")[0]
    assert r"$\alpha \cdot T$" in tex and "α" not in tex


@pytest.mark.parametrize("test_lengths, drawn", [(range(8, 31), True), (range(3, 9), False)])
def test_gpt4o_is_drawn_only_over_the_problems_it_answered(test_lengths, drawn):
    """GPT-4o's 55.68 % was measured on problems of 8-30 characters: over others the line would
    compare unlike things, so the caption says why it is missing."""
    summary = tables.summary_csv(pd.DataFrame(_records()))
    lengths = pd.DataFrame({"split": "test", "length": list(test_lengths), "count": 1,
                            "percent": 1.0})
    plt = plotting.pyplot()
    fig = expr_figures._accuracy_vs_params(plt, summary, sorted(set(summary["model"])), lengths)
    ys = [tuple(line.get_ydata()) for line in fig.axes[0].get_lines()]
    caption = fig.legends[0].get_texts()[0].get_text()
    plt.close(fig)
    assert ((expr_figures.GPT4O_ACC, expr_figures.GPT4O_ACC) in ys) == drawn
    assert caption.startswith("GPT-4o, 55.68 %") == drawn
    assert ("not drawn" in caption) != drawn
