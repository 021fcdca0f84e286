"""Tables and figures from synthetic run records: values, ordering, formatting, atomic writes."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest

from arithrepro.report import expr_figures, figures, plotting, tables

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
    headline = tables.headline_json(runs, {"expr": (("test_acc", "ood_acc"), "^(small|large)$"),
                                           "other": (("exact",), "")})
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
    line = tables.write_all(metrics_dir, ["expr", "other"], {"expr": (("test_acc",), "")})
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
    assert plotting.arch_style("mamba", everyone)["color"] == plotting.PALETTE[3]
    assert plotting.arch_order(everyone) == ["gpt", "lstm", "retran", "mamba", "xlstm"]
    assert [plotting.display_name(m) for m in ["gpt", "lstm", "retran", "mamba"]] == [
        "GPT", "LSTM", "ReTran", "mamba"]


def test_registry_maps_expr_to_its_renderer():
    assert figures.FIGURES["expr"].render is expr_figures.render_expr
