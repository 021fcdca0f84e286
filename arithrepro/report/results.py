"""pages/results.json, collected from the run records by the `results` stage (the pages
rendered from it: report/results_page.py), small copies of the figures a reader looks at first
(pages/results/), their publication to docs/ and the README's blocks, rendered from the
published docs/results.json (`arithrepro results --publish`, `--readme`).

Every number on the page and in the block comes from the records: each task's headline metrics
per model and size (mean ± sample std over seeds, and n), where the runs ran (commit, CPU and its
vector unit, threads, torch) and the training and evaluation time they report.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd

from arithrepro.report.tables import by_configuration, format_mean, headline_rows

README_START = "<!-- results: written by `arithrepro results --readme` from docs/results.json; edit nothing here -->"
README_END = "<!-- /results -->"
CLAIMS_START = "<!-- claims: written by `arithrepro results --readme` from docs/results.json; edit nothing here -->"
CLAIMS_END = "<!-- /claims -->"
THUMBNAIL_WIDTH = 900   # pixels: a figure as a repository's web view shows it


def collect(df: pd.DataFrame, reports: dict, origins: list[dict], profile: str,
            findings: dict | None = None, claims: dict | None = None) -> dict:
    """docs/results.json: {profile, runs, origin: {...}, seconds: {...}, tasks: {task: {metrics,
    cells: [{model, size, n, <metric>: {mean, std}}], findings: [...]}}}. `df`: one row per run
    (report/tables' collect_runs); `reports`: {task: its REPORT}; `origins`: each
    record's training provenance; `findings`: {task: its verdicts (arithrepro/findings/)};
    `claims`: {task: {source, claims}} (arithrepro/claims.py, ledger_rows)."""
    tasks = {}
    for task, report in reports.items():
        metrics, out = report.headline, []
        for (model, size), runs in by_configuration(headline_rows(df, task, report)):
            entry = {"model": model, "size": size, "n": int(len(runs))}
            kept = [m for m in metrics if m in runs]
            entry["seeds"] = {int(row["seed"]): {m: float(row[m]) for m in kept if pd.notna(row[m])}
                              for _, row in runs.sort_values("seed").iterrows()}
            for m in metrics:
                values = [float(v) for v in runs[m].dropna()] if m in runs else []
                if values:
                    entry[m] = {"mean": statistics.fmean(values),
                                "std": statistics.stdev(values) if len(values) > 1 else None}
            out.append(entry)
        tasks[task] = {"metrics": list(metrics), "cells": out,
                       "findings": (findings or {}).get(task, []),
                       **({"ledger": claims[task]} if claims and task in claims else {})}
    from arithrepro.claims import counts

    judged = [c for t in tasks.values() for c in t.get("ledger", {}).get("claims", [])]
    return {"profile": profile, "runs": int(len(df)), "origin": origin(origins),
            "claims": counts(judged),
            "seconds": {k: float(df[k].sum()) for k in ("train_seconds", "eval_seconds")
                        if k in df},
            # what each task costs, in the order the headline lists them
            "task_seconds": {task: {k: float(df.loc[df["task"] == task, k].sum())
                                    for k in ("train_seconds", "eval_seconds") if k in df}
                             for task in reports if (df["task"] == task).any()},
            "tasks": tasks}


def origin(origins: list[dict]) -> dict:
    """Where runs ran, from their records' provenance: each field's values (one, if all agree)."""
    fields = {"commit": lambda o: o.get("commit"), "dirty": lambda o: o.get("dirty"),
              "cpu": lambda o: o.get("gpu") or o.get("cpu"),
              "cpu_capability": lambda o: o.get("cpu_capability"),
              "threads": lambda o: o.get("threads"),
              "torch": lambda o: (o.get("versions") or {}).get("torch"),
              "python": lambda o: o.get("python")}
    return {name: sorted({get(o) for o in origins}, key=str) for name, get in fields.items()}


def _stat(metric: str, stat: dict | None) -> str:
    return format_mean(metric, stat["mean"], stat["std"]) if stat else "–"


def where(data: dict) -> str:
    o = data["origin"]
    commits = ", ".join(str(c)[:7] for c in o["commit"]) + (" (with uncommitted changes)"
                                                           if True in o["dirty"] else "")
    join = lambda k: " / ".join(str(v) for v in o[k])
    return (f"profile **{data['profile']}**, {data['runs']} runs, commit {commits}, on "
            f"{join('cpu')} ({join('cpu_capability')}), {join('threads')} "
            f"thread{'' if o['threads'] == [1] else 's'} per run, "
            f"torch {join('torch')}, Python {join('python')}")


def costs(data: dict) -> str:
    """The runs' training and evaluation time, in all and per task."""
    s = data["seconds"]
    return (f"The runs report {_minutes(s.get('train_seconds', 0))} of training and "
            + (f"{_minutes(s['eval_seconds'])} of evaluation" if s.get("eval_seconds")
               else "their evaluation inside it") + " in all"
            + _per_task(data.get("task_seconds", {})) + ".")


def seeds_table(t: dict) -> list[str]:
    """Every seed's headline metrics, folded under the table of means."""
    rows = [(c["model"], c["size"], seed, values) for c in t["cells"]
            for seed, values in (c.get("seeds") or {}).items()]
    if not rows:
        return []
    lines = ["<details><summary>Every seed</summary>", "",
             "| model | size | seed | " + " | ".join(t["metrics"]) + " |",
             "|---|---|---:|" + "---:|" * len(t["metrics"])]
    for model, size, seed, values in rows:
        lines.append(f"| {model} | {size} | {seed} | " + " | ".join(
            format_mean(m, values[m], None) if m in values else "–" for m in t["metrics"]) + " |")
    return [*lines, "", "</details>", ""]


def readme_block(data: dict) -> str:
    """The README's results section body: one row per task, its headline metrics per cell (the
    run's provenance is in the claims block above it, once)."""
    rows = ["| experiment | headline metrics: mean ± std over seeds (n) | detail |",
            "|---|---|---|"]
    for task, t in data["tasks"].items():
        parts = []
        for c in t["cells"]:
            values = ", ".join(f"{m} {_stat(m, c.get(m))}" for m in t["metrics"])
            parts.append(f"{c['model']} {c['size']}: {values} ({c['n']})")
        rows.append(f"| {task} | " + "; ".join(parts) + f" | [docs/{task}.md](docs/{task}.md) |")
    return "\n".join([README_START, "", f"The {data['runs']} runs the claims above rest on, per "
                      "model and size; all of it on [docs/results.md](docs/results.md).", "",
                      *rows, "", README_END])


def publishable(data: dict, path: Path, changed=None) -> None:
    """Refuses (ValueError naming `path`) results a reader must not take for the reference: a
    smoke profile's, or, given `changed()` (the stages `dvc status` finds changed), any while a
    stage is not what the pipeline's current state makes (a run cut short, a change not run)."""
    if data.get("profile") == "smoke":
        raise ValueError(f"{path}: from the smoke profile, which is never published; its pages "
                         "stay where the run wrote them")
    stale = changed() if changed else []
    if stale:
        raise ValueError(f"{path}: {len(stale)} stage(s) of the pipeline are not up to date "
                         f"({', '.join(stale[:3])}{', ...' if len(stale) > 3 else ''}); "
                         "run `arithrepro repro` first")


def publish_pages(src: Path, dst: Path, names: tuple[str, ...]) -> None:
    """Each of `names` (files and folders) copied from src/ to dst/, every one checked present
    before any is written; a folder is copied beside its old copy, then swapped in."""
    import shutil

    missing = [str(src / n) for n in names if not (src / n).exists()]
    if missing:
        raise FileNotFoundError(f"{missing[0]}: missing; run `dvc repro results`")
    from arithrepro.io import copy_file

    for name in names:
        if (src / name).is_dir():
            new, old = dst / f".{name}.new", dst / f".{name}.old"
            shutil.rmtree(new, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
            shutil.copytree(src / name, new)
            if (dst / name).exists():
                (dst / name).rename(old)
            new.rename(dst / name)
            shutil.rmtree(old, ignore_errors=True)
        else:
            copy_file(src / name, dst / name)


def with_block(readme: str, block: str, start_mark: str = README_START,
               end_mark: str = README_END) -> str:
    """README.md with its block between the two marks replaced (ValueError if it has none);
    the block holds the marks itself."""
    start, end = readme.find(start_mark), readme.find(end_mark)
    if start < 0 or end < start:
        raise ValueError(f"README.md: no block {start_mark} ... {end_mark}")
    return readme[:start] + block + readme[end + len(end_mark):]


def thumbnail(src: Path, dst: Path, width: int = THUMBNAIL_WIDTH) -> Path:
    """A copy of the PNG at src no wider than `width` pixels, written atomically."""
    from PIL import Image

    from arithrepro.io import atomic_path

    with Image.open(src) as image:
        if image.width > width:
            image = image.resize((width, round(image.height * width / image.width)),
                                 Image.LANCZOS)
        with atomic_path(dst) as tmp:
            image.save(tmp, format="PNG", optimize=True)
    return dst


def _per_task(seconds: dict) -> str:
    """': expr 40.2 min of training and 1.1 min of evaluation, abacus ...', or nothing."""
    if not seconds:
        return ""
    # a task that scores its runs while they train reports no evaluation time of its own
    return ": " + ", ".join(f"{task} {_minutes(s.get('train_seconds', 0))} of training and "
                            + (f"{_minutes(s['eval_seconds'])} of evaluation"
                               if s.get("eval_seconds") else "its evaluation inside it")
                            for task, s in seconds.items())


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def source_study(data: dict) -> dict:
    """docs/runsets/modular-source.json from the results (docs/results.json) of a workspace
    whose params ran the modular-source target (sanity=source): where its runs ran, modular's
    cells, the verdicts of the claims that target tests on the seeds that chose nothing, and
    apart, on the source's seeds that were watched while a recipe was chosen."""
    if "modular-source" not in data.get("targets", []):
        raise ValueError("results.json: its params ran no modular-source target "
                         "(compose them with sanity=source)")
    modular = data["tasks"]["modular"]
    ledger = modular.get("ledger", {})
    from arithrepro.claims import watched_seeds

    watched = watched_seeds(ledger.get("source", {}))
    seeds = sorted({int(s) for c in modular["cells"] for s in c.get("seeds", {})})

    def judged(c: dict, seen: bool) -> dict | None:
        j = next((j for j in c.get("judged") or [] if j["set"] == "modular-source"
                  and bool(j.get("watched")) == seen), None)
        return None if j is None else {"id": c["id"], "claim": c["claim"], **{
            k: j.get(k) for k in ("outcome", "ours", "n", "why", "class")}}

    tested = [c for c in ledger.get("claims", []) if "modular-source" in c.get("profiles", [])]
    out = {"target": "modular-source", "task": "modular", "profile": data["profile"],
           "runs": data.get("runs"), "origin": data["origin"], "cells": modular["cells"],
           "seeds": [s for s in seeds if s not in watched],
           "claims": [j for c in tested if (j := judged(c, False))]}
    if watched & set(seeds):
        out["watched"] = {"seeds": sorted(watched & set(seeds)),
                          "claims": [j for c in tested if (j := judged(c, True))]}
    return out


def source_merged(old: dict | None, new: dict) -> dict:
    """`new` (source_study's) over the file's `old` content: a run of the watched seeds alone
    (no deciding seed; `make modular-source SOURCE_SET=...`) keeps the file's deciding part and
    replaces its watched part, which then names the commit and machine of its own runs; any
    other run replaces the file whole."""
    if old is None or new["seeds"] or not new.get("watched") or not old.get("seeds"):
        return new
    return {**old, "watched": {**new["watched"], "origin": new["origin"], "runs": new["runs"]}}
