"""Run records -> metrics/summary.{json,csv} and a markdown table per task.

A run record is metrics/<task>/runs/<model>-<size>-<seed>.json: the keys task, model, size
and seed, any numeric metrics, and optionally a provenance block (arithrepro.provenance, per
stage: {"train": {...}, "evaluate": {...}}). Nothing here names a task, and no task's metrics
except to put the common ones first: a task's counted families are declared in its REPORT
(tasks/declared.py), tables of its own beside its figures (report/figures.py), so a new task's
metrics flow through.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pandas as pd

from arithrepro.io import ArtifactError, write_frame, write_json, write_text
from arithrepro.runs import CONFIG_KEY, run_name

KEYS = ["task", "model", "size", "seed"]
# Metrics shown first in the markdown tables; any others follow in record order.
PREFERRED = ["test_acc", "id_acc", "ood_acc", "final_val_loss", "best_val_loss", "final_bpc",
             "train_seconds"]
# The fields of a record's training provenance that tell two machines' runs apart: summary.csv
# ends with them, summary.json and the markdown tables (metrics only) leave them out, and the
# whole block stays in the record. machine: the GPU's name, else the CPU model.
PROVENANCE = ["commit", "dirty", "machine", "cpu_capability", "threads", "precision"]


# --- reading ---------------------------------------------------------------------------------

def collect_runs(metrics_dir: Path, tasks: list[str], wanted: dict | None = None) -> pd.DataFrame:
    """One row per run record of the given tasks: task, model, size, seed, then the metrics.
    `wanted`: {task: its record files}, the runs the params ask for (a record another profile
    or an earlier sweep left in the folder is not one of them); else every record there."""
    records = []
    for task in tasks:
        run_dir = Path(metrics_dir) / task / "runs"
        if wanted and task in wanted:
            files = list(wanted[task])
            for path in files:
                if not Path(path).is_file():
                    raise FileNotFoundError(2, "missing", str(path))
        else:
            files = sorted(run_dir.rglob("*.json"))  # modular: runs/<study>/<run>.json
        if not files:
            raise ValueError(f"{run_dir}: no run records for task {task!r}; "
                             f"run `arithrepro evaluate` for its runs first")
        records += [_read_record(path, task) for path in files]
    return _frame(records)


def wanted_runs(params: dict, tasks: list[str], stages: tuple[str, ...] = ()) -> pd.DataFrame:
    """collect_runs over the records of the runs the params ask for (`Task.runs`; those of the
    train `stages` alone, where given), relative to the working directory; a missing one is
    named with the DVC stage that writes it."""
    from arithrepro.tasks import registry

    wanted = {name: [run.files.record for run in registry.wanted(name, params, stages)]
              for name in tasks}
    try:
        return collect_runs(Path("metrics"), tasks, wanted)
    except FileNotFoundError as err:
        if err.filename is None:
            raise
        from arithrepro.pipeline import producer

        stage = producer(err.filename)
        command = f"dvc repro {stage}" if stage else "dvc repro"
        raise FileNotFoundError(f"{err.filename}: missing; run `{command}`") from None


def _read_record(path: Path, task: str) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ArtifactError(path, f"unreadable run record ({err})") from None
    if not isinstance(record, dict):
        raise ArtifactError(path, "a run record must be a JSON object")
    missing = [k for k in KEYS if k not in record]
    if missing:
        raise ArtifactError(path, f"run record lacks {', '.join(missing)}")
    _check_keys(path, record, task)
    record = dict(record)
    origin = record.pop("provenance", None)
    for name, value in record.items():
        if name not in KEYS:
            _check_metric(path, name, value)
    return {**record, **_provenance_columns(path, origin)}


def _provenance_columns(path: Path, origin) -> dict:
    """The PROVENANCE fields of the training's block; none for a record without one."""
    if origin is None:
        return {}
    if not isinstance(origin, dict) or not isinstance(origin.get("train", {}), dict):
        raise ArtifactError(path, "provenance must be an object of per-stage objects")
    train = origin.get("train", {})
    if not train:
        return {}
    fields = {**train, "machine": train.get("gpu") or train.get("cpu")}
    return {k: fields.get(k) for k in PROVENANCE}


def _check_keys(path: Path, record: dict, task: str) -> None:
    if record["task"] != task:
        raise ArtifactError(path, f"task {record['task']!r} in a record of task {task!r}")
    if not isinstance(record["model"], str) or not isinstance(record["size"], str):
        raise ArtifactError(path, "model and size must be strings")
    if isinstance(record["seed"], bool) or not isinstance(record["seed"], int):
        raise ArtifactError(path, f"seed = {record['seed']!r} is not an integer")
    # The summary is keyed by the run's name; a record that disagrees with its file name would
    # silently replace another run's entry.
    name = run_name(record["model"], record["size"], record["seed"])
    if path.stem != name:
        raise ArtifactError(path, f"the record is for run {name}, not {path.stem}")


def _check_metric(path: Path, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArtifactError(path, f"metric {name!r} = {value!r} is not a number")
    # Tables and figures scale accuracies to percent; a record already in percent would
    # show as thousands of percent instead of failing.
    if is_accuracy(name) and (value < 0 or value > 1):
        raise ArtifactError(path, f"{name} = {value!r} is not a fraction in [0, 1]")


def _frame(records: list[dict]) -> pd.DataFrame:
    metrics = list(dict.fromkeys(k for r in records for k in r
                                 if k not in KEYS and k not in PROVENANCE))
    origin = [k for k in PROVENANCE if any(k in r for r in records)]
    df = pd.DataFrame.from_records(records, columns=KEYS + metrics + origin)
    for name in metrics:
        present = [r[name] for r in records if name in r]
        # Tasks with different metrics leave gaps, which would turn an int column into floats;
        # the nullable Int64 keeps counts (params, steps) as integers in the summaries.
        if all(isinstance(v, int) for v in present):
            df[name] = df[name].astype("Int64")
        else:
            df[name] = df[name].astype("float64")
    return df.astype({"seed": "int64"})


def metric_names(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c not in KEYS and c not in PROVENANCE]


# --- summaries -------------------------------------------------------------------------------

def size_order(df: pd.DataFrame) -> list[str]:
    """Size names in the order they first appear among the runs sorted by parameter count.

    Size names carry no order of their own (alphabetically, large < medium < small), but a
    bigger size has more parameters for every model.
    """
    ranked = df.sort_values("params", kind="stable") if "params" in df else df
    return list(dict.fromkeys(ranked["size"]))


def summary_csv(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run, sorted by task, model, size (smallest first) and seed."""
    rank = {size: i for i, size in enumerate(size_order(df))}
    return (df.assign(_rank=df["size"].map(rank))
              .sort_values(["task", "model", "_rank", "seed"], kind="stable")
              .drop(columns="_rank")
              .reset_index(drop=True))


def summary_json(df: pd.DataFrame) -> dict:
    """{task: {"<model>-<size>-<seed>": {metric: value}}}, in the order of summary_csv."""
    out: dict = {}
    metrics = metric_names(df)
    for row in summary_csv(df).to_dict("records"):
        name = run_name(row["model"], row["size"], int(row["seed"]))
        values = {m: _plain(row[m]) for m in metrics}
        out.setdefault(row["task"], {})[name] = {m: v for m, v in values.items() if v is not None}
    return out


def headline_rows(df: pd.DataFrame, task: str, report) -> pd.DataFrame:
    """The task's runs at the sizes its headline is taken over (report.headline_sizes)."""
    rows = df[df["task"] == task]
    if report.headline_sizes:
        rows = rows[[re.search(report.headline_sizes, s) is not None for s in rows["size"]]]
    return rows


def headline_json(df: pd.DataFrame, reports: dict) -> dict:
    """{task: {"<model>-<size>": {metric: mean, metric_std: std}}} over seeds, for each task's
    headline metrics and the sizes its pattern matches: the few numbers `dvc metrics diff` and
    `dvc exp show` compare. std is the sample standard deviation (n - 1), left out for a
    single seed."""
    out: dict = {}
    for task, report in reports.items():
        metrics = report.headline
        for (model, size), runs in by_configuration(headline_rows(df, task, report)):
            entry = {}
            for m in metrics:
                values = [float(v) for v in runs[m].dropna()] if m in runs else []
                if values:
                    entry[m] = _plain(statistics.fmean(values))
                    if len(values) > 1:
                        entry[f"{m}_std"] = _plain(statistics.stdev(values))
            if entry:
                out.setdefault(task, {})[f"{model}-{size}"] = entry
    return out


def _plain(value) -> int | float | None:
    """A JSON-safe Python number, or None for a gap (another task's metric, NaN or inf).

    Non-finite values are left out rather than written, because strict JSON readers reject
    NaN and Infinity.
    """
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = value
    elif hasattr(value, "item"):  # numpy scalars
        number = value.item()
    else:
        return None
    if isinstance(number, float) and not math.isfinite(number):
        return None
    return number


# --- markdown --------------------------------------------------------------------------------

def default_metrics(df: pd.DataFrame, task: str) -> list[str]:
    """The task's metrics (params aside, which has its own column), common ones first."""
    rows = df[df["task"] == task]
    present = [m for m in metric_names(df) if m != "params" and rows[m].notna().any()
               and not counted(m)]
    return [m for m in PREFERRED if m in present] + [m for m in present if m not in PREFERRED]


def markdown_table(df: pd.DataFrame, task: str, metrics: list[str]) -> str:
    """A GitHub markdown table of the task: one row per (model, size), mean ± std over seeds."""
    rows = df[df["task"] == task]
    if rows.empty:
        raise ValueError(f"no run records for task {task!r}")
    unknown = [m for m in metrics if m not in rows.columns]
    if unknown:
        raise ValueError(f"task {task!r}: no metric {', '.join(unknown)} in the run records")
    header = ["model", "size", "params", "seeds", *metrics]
    body = [_table_row(runs, metrics) for _, runs in by_configuration(rows)]
    note = ("Mean ± sample standard deviation (n − 1) over seeds; "
            "a configuration with a single seed shows its value alone.")
    return f"### {task}\n\n{note}\n\n{_render(header, body)}\n"


def by_configuration(rows: pd.DataFrame) -> list[tuple[tuple[str, str], pd.DataFrame]]:
    """Each configuration's runs (model, size: a run without its seed), ordered by model and
    then by parameter count."""
    rank = {size: i for i, size in enumerate(size_order(rows))}

    def key(item):
        (model, size), group = item
        params = group["params"].mean() if "params" in group else math.nan
        return (model, math.inf if pd.isna(params) else params, rank[size])

    return sorted(rows.groupby(CONFIG_KEY, sort=False), key=key)


def _table_row(runs: pd.DataFrame, metrics: list[str]) -> list[str]:
    params = runs["params"].dropna() if "params" in runs else pd.Series(dtype=float)
    return [str(runs["model"].iloc[0]), str(runs["size"].iloc[0]),
            f"{round(params.mean()):,}" if len(params) else "–",
            str(len(runs)),
            *(format_stat(m, [float(v) for v in runs[m].dropna()]) for m in metrics)]


def format_stat(metric: str, values: list[float]) -> str:
    """'mean ± std unit' of a metric over seeds, formatted as its name's suffix says."""
    if not values:
        return "–"
    return format_mean(metric, statistics.fmean(values),
                       statistics.stdev(values) if len(values) > 1 else None)


def format_mean(metric: str, mean: float, std: float | None) -> str:
    """'mean ± std unit' (std None: the mean alone), formatted as the metric's name says. A
    metric without a fixed format (not an accuracy) shows mean and std to the decimal of the
    std's first significant digit: 2.170 ± 0.004, not 2.17 ± 0.004366."""
    fmt, unit = _formatter(metric)
    if std is None:
        return fmt(mean) + unit
    if fmt is _general and 0 < std < 1 and mean != round(mean):
        places = min(6, -math.floor(math.log10(std)))
        return f"{mean:.{places}f} ± {std:.{places}f}" + unit
    return f"{fmt(mean)} ± {fmt(std)}" + unit


def counted(metric: str):
    """The counted family (a task's REPORT.counts: acc_len8, ood_r16, ...) `metric` is one of,
    or None."""
    from arithrepro.tasks.registry import REPORTS

    return next((c for r in REPORTS.values() for c in r.counts
                 if metric.startswith(c.prefix) and metric[len(c.prefix):].isdigit()), None)


def is_accuracy(metric: str) -> bool:
    """Fractions in [0, 1]: *_acc, acc_*, and the counted families (acc_r8, ood_r16, ...)."""
    return metric.endswith("_acc") or metric.startswith("acc_") or counted(metric) is not None


def _formatter(metric: str):
    if is_accuracy(metric):
        return (lambda x: f"{100 * x:.1f}"), " %"
    if metric.endswith("loss"):
        return _significant4, ""
    if metric.endswith("_seconds"):
        return (lambda x: f"{x:.0f}"), " s"
    return _general, ""


def _significant4(x: float) -> str:
    # '#' keeps trailing zeros (0.8300, not 0.83), at the price of a bare trailing point.
    text = f"{x:#.4g}"
    return text if "e" in text else text.rstrip(".")


def _general(x: float) -> str:
    # Counts (steps) and large rates (tokens/s) read best as grouped integers: 312, not 312.0,
    # and 120,388, not 1.204e+05.
    return f"{x:,.0f}" if x == round(x) or abs(x) >= 1000 else f"{x:.4g}"


def _render(header: list[str], body: list[list[str]]) -> str:
    """Pipe table, padded so that the raw file reads as a table too; numbers right-aligned."""
    rows = [[c.replace("|", "\\|") for c in row] for row in [header, *body]]
    widths = [max(3, *(len(r[i]) for r in rows)) for i in range(len(header))]
    left = {"model", "size"}
    rule = [("-" * (w - 1) + ":") if name not in left else "-" * w
            for name, w in zip(header, widths)]

    def line(cells, right_aligned=True):
        return "| " + " | ".join(
            c.rjust(w) if right_aligned and name not in left else c.ljust(w)
            for c, w, name in zip(cells, widths, header)) + " |"

    return "\n".join([line(rows[0], right_aligned=False), line(rule, right_aligned=False),
                      *(line(r) for r in rows[1:])])


# --- counted families ------------------------------------------------------------------------

def by_suffix_table(rows: pd.DataFrame, prefix: str, label: str, title: str, note: str) -> str:
    """Metrics named <prefix><n> as rows by n, one column per (model, size): e.g. the looped
    task's exact match by length (acc_len8, acc_len12, ...)."""
    names = [m for m in metric_names(rows) if m.startswith(prefix) and m[len(prefix):].isdigit()
             and rows[m].notna().any()]
    names.sort(key=lambda m: int(m[len(prefix):]))
    groups = by_configuration(rows)
    header = [label] + [f"{model} {size}" for (model, size), _ in groups]
    body = [[m[len(prefix):]] + [format_stat(m, [float(v) for v in group[m].dropna()])
                                 for _, group in groups] for m in names]
    note = f"{note}\n\n" if note else ""
    return f"### {title}\n\n{note}{_render(header, body)}\n"


# --- the stage -------------------------------------------------------------------------------

def write_summary(metrics_dir: Path, df: pd.DataFrame, reports: dict) -> list[Path]:
    """headline.json (`reports`: {task: its REPORT}), summary.json and summary.csv under
    metrics_dir."""
    metrics_dir = Path(metrics_dir)
    written = [metrics_dir / "headline.json", metrics_dir / "summary.json",
               metrics_dir / "summary.csv"]
    write_json(written[0], headline_json(df, reports))
    write_json(written[1], summary_json(df))
    write_frame(written[2], summary_csv(df))
    return written


def write_task_tables(metrics_dir: Path, task: str, df: pd.DataFrame) -> list[Path]:
    """metrics/<task>.md from the task's rows of df: its main table, or the tables it writes
    itself (report/figures.py: each a metrics/<task>.<suffix>), then a table per counted family
    its REPORT declares."""
    from arithrepro.report.figures import FIGURES
    from arithrepro.tasks.declared import Report
    from arithrepro.tasks.registry import REPORTS

    report, rows = REPORTS.get(task, Report()), df[df["task"] == task]
    own = FIGURES[task].tables if task in FIGURES else None
    texts = own(rows) if own else {"md": markdown_table(df, task, default_metrics(df, task))}
    for count in report.counts:
        texts["md"] += "\n" + by_suffix_table(rows, count.prefix, count.label,
                                              f"{task}: {count.title}", count.note)
    written = [Path(metrics_dir) / f"{task}.{suffix}" for suffix in texts]
    for path, text in zip(written, texts.values()):
        write_text(path, text)
    return written


def write_all(metrics_dir: Path, tasks: list[str], reports: dict | None = None,
              wanted: dict | None = None) -> str:
    """The summary and every task's tables from the records `wanted` (collect_runs); return a
    summary line."""
    df = collect_runs(metrics_dir, tasks, wanted)
    written = write_summary(metrics_dir, df, reports or {})
    for task in tasks:
        written += write_task_tables(metrics_dir, task, df)
    return describe(df, tasks, written)


def describe(df: pd.DataFrame, tasks: list[str], written: list[Path]) -> str:
    return (f"{_count(len(df), 'run')}, {_count(len(tasks), 'task')} -> "
            + ", ".join(str(p) for p in written))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
