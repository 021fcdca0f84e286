"""The results page: docs/results.md, docs/results.json and small copies of the figures a reader
looks at first (docs/results/), written from the run records by the `results` stage, and the
README's results block, rendered from docs/results.json (`arithrepro results --readme`).

Every number on the page and in the block comes from the records: each task's headline metrics
per model and size (mean ± sample std over seeds, and n), where the runs ran (commit, CPU and its
vector unit, threads, torch) and the training and evaluation time they report.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd

from arithrepro.report.tables import configurations, format_mean

README_START = "<!-- results: written by `arithrepro results --readme` from docs/results.json; edit nothing here -->"
README_END = "<!-- /results -->"
CLAIMS_START = "<!-- claims: written by `arithrepro results --readme` from docs/results.json; edit nothing here -->"
CLAIMS_END = "<!-- /claims -->"
THUMBNAIL_WIDTH = 900   # pixels: a figure as a repository's web view shows it


def collect(df: pd.DataFrame, headline: dict, origins: list[dict], profile: str,
            findings: dict | None = None, claims: dict | None = None) -> dict:
    """docs/results.json: {profile, runs, origin: {...}, seconds: {...}, tasks: {task: {metrics,
    cells: [{model, size, n, <metric>: {mean, std}}], findings: [...]}}}. `df`: one row per run
    (report/tables' collect_runs); `headline`: {task: (metrics, sizes pattern)}; `origins`: each
    record's training provenance; `findings`: {task: its verdicts (arithrepro/findings/)};
    `claims`: {task: {source, claims}} (arithrepro/claims.py, ledger_rows)."""
    import re

    tasks = {}
    for task, (metrics, sizes) in headline.items():
        rows = df[df["task"] == task]
        if sizes:
            rows = rows[[re.search(sizes, s) is not None for s in rows["size"]]]
        out = []
        for (model, size), runs in configurations(rows):
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
    return {"profile": profile, "runs": int(len(df)), "origin": _origin(origins),
            "claims": counts(judged),
            "seconds": {k: float(df[k].sum()) for k in ("train_seconds", "eval_seconds")
                        if k in df},
            # what each task costs, in the order the headline lists them
            "task_seconds": {task: {k: float(df.loc[df["task"] == task, k].sum())
                                    for k in ("train_seconds", "eval_seconds") if k in df}
                             for task in headline if (df["task"] == task).any()},
            "tasks": tasks}


def _origin(origins: list[dict]) -> dict:
    """Where the runs ran: each field's values over the records (one, if all agree)."""
    fields = {"commit": lambda o: o.get("commit"), "dirty": lambda o: o.get("dirty"),
              "cpu": lambda o: o.get("gpu") or o.get("cpu"),
              "cpu_capability": lambda o: o.get("cpu_capability"),
              "threads": lambda o: o.get("threads"),
              "torch": lambda o: (o.get("versions") or {}).get("torch"),
              "python": lambda o: o.get("python")}
    return {name: sorted({get(o) for o in origins}, key=str) for name, get in fields.items()}


def _stat(metric: str, stat: dict | None) -> str:
    return format_mean(metric, stat["mean"], stat["std"]) if stat else "–"


def _where(data: dict) -> str:
    o = data["origin"]
    commits = ", ".join(str(c)[:7] for c in o["commit"]) + (" (with uncommitted changes)"
                                                           if True in o["dirty"] else "")
    join = lambda k: " / ".join(str(v) for v in o[k])
    return (f"profile **{data['profile']}**, {data['runs']} runs, commit {commits}, on "
            f"{join('cpu')} ({join('cpu_capability')}), {join('threads')} "
            f"thread{'' if o['threads'] == [1] else 's'} per run, "
            f"torch {join('torch')}, Python {join('python')}")


def page(data: dict, figures: dict) -> str:
    """docs/results.md; `figures`: {task: [the copies' names under docs/results/]}."""
    s = data["seconds"]
    lines = ["# Results", "",
             "Written by the pipeline's `results` stage from the run records; edit nothing here.",
             "", f"From {_where(data)}. The runs report {_minutes(s.get('train_seconds', 0))} of "
             f"training and {_minutes(s.get('eval_seconds', 0))} of evaluation in all"
             + _per_task(data.get("task_seconds", {})) + ".", "",
             "Each table entry: mean ± sample standard deviation (n − 1) over its n seeds; one seed "
             "shows its value alone. What each metric means, and the sources' own numbers: the "
             "task's page.", ""]
    for task, t in data["tasks"].items():
        lines += [f"## {task}", "", f"[docs/{task}.md]({task}.md)", ""]
        header = ["model", "size", "n", *t["metrics"]]
        lines += ["| " + " | ".join(header) + " |",
                  "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
        for c in t["cells"]:
            lines.append("| " + " | ".join([c["model"], c["size"], str(c["n"]),
                                            *(_stat(m, c.get(m)) for m in t["metrics"])]) + " |")
        lines.append("")
        lines += seeds_table(t)
        lines += findings_table(t.get("findings", []))
        lines += ledger_section(task, t.get("ledger"))
        for name in figures.get(task, []):
            lines += [f"![{task}: {Path(name).stem}](results/{name})", ""]
    return "\n".join(lines)


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


def counts_words(c: dict) -> str:
    """'12 reproduced, 3 not reproduced, 5 too close to call, 40 not tested here'."""
    from arithrepro.findings.base import OUTCOMES

    return ", ".join(f"{c.get(o, 0)} {o}" for o in OUTCOMES)


def ledger_section(task: str, ledger: dict | None) -> list[str]:
    """The source's claims (claims/<task>.yaml), each with the source's number, ours and the
    verdict; its settings apart, folded."""
    from arithrepro.claims import counts
    from arithrepro.findings.base import verdict_word

    if not ledger:
        return []
    src, rows = ledger["source"], ledger["claims"]
    judged = [r for r in rows if r["outcome"] is not None]
    lines = [f"### The source's claims: {src['title']}", "",
             f"Source {src['file']} ([claims/{task}.yaml](../claims/{task}.yaml)): "
             f"{src['carries']} Of its {len(judged)} claims: {counts_words(counts(rows))}.", "",
             "| claim | in the source | the source's number | "
             "ours (this page's runs, or a named target's) | verdict |",
             "|---|---|---|---|---|"]
    for r in judged:
        ours = r["ours"] or "–"
        if r.get("via"):   # measured by a named target's runs, not this page's
            ours = f"`make {r['via']}`: {ours}"
        verdict = verdict_word(r) + (f": {r['why']}" if r["why"] else "")
        lines.append(f"| {_cell(r['claim'])} | {_cell(r['where'])} | {_cell(r['source'])} | "
                     f"{_cell(ours)} | {_cell(verdict)} |")
    settings = [r for r in rows if r["outcome"] is None]
    if settings:
        lines += ["", f"<details><summary>The source's settings ({len(settings)}), and how "
                  "this project follows them</summary>", "",
                  "| setting | in the source | here |", "|---|---|---|"]
        lines += [f"| {_cell(r['claim'])} | {_cell(r['where'])} | {_cell(r['why'])} |"
                  for r in settings]
        lines += ["", "</details>"]
    return [*lines, ""]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def findings_table(findings: list[dict]) -> list[str]:
    """A task's findings as lines of a table: claim, the stated test, the verdict, what it
    rests on."""
    from arithrepro.findings.base import verdict_word

    if not findings:
        return []
    lines = ["| finding | test | verdict | measured |", "|---|---|---|---|"]
    for f in findings:
        lines.append(f"| {f['claim']} | {f.get('test', f.get('target'))} | {verdict_word(f)} | "
                     f"{f['measured']} |")
    return [*lines, ""]


def readme_block(data: dict) -> str:
    """The README's results section body: one row per task, its headline metrics per cell."""
    rows = ["| experiment | headline metrics: mean ± std over seeds (n) | detail |",
            "|---|---|---|"]
    for task, t in data["tasks"].items():
        parts = []
        for c in t["cells"]:
            values = ", ".join(f"{m} {_stat(m, c.get(m))}" for m in t["metrics"])
            parts.append(f"{c['model']} {c['size']}: {values} ({c['n']})")
        rows.append(f"| {task} | " + "; ".join(parts) + f" | [docs/{task}.md](docs/{task}.md) |")
    return "\n".join([README_START, "", f"From {_where(data)}; all of it on "
                      "[docs/results.md](docs/results.md).", "", *rows, "", README_END])


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
    return ": " + ", ".join(f"{task} {_minutes(s.get('train_seconds', 0))} of training and "
                            f"{_minutes(s.get('eval_seconds', 0))} of evaluation"
                            for task, s in seconds.items())


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def claims_block(data: dict) -> str:
    """The README's first-screen count of the sources' claims by verdict, per source."""
    lines = [CLAIMS_START, ""]
    total = data.get("claims")
    if total:
        lines += [f"The sources' claims, each tested on seeds no recipe was tuned on "
                  f"([claims/](claims), [docs/results.md](docs/results.md)): "
                  f"**{counts_words(total)}**; {total.get('settings', 0)} more are settings "
                  "the project follows or departs from, each named.", "",
                  "| source | reproduced | not reproduced | too close to call | not tested here |",
                  "|---|---:|---:|---:|---:|"]
        from arithrepro.claims import counts
        from arithrepro.findings.base import OUTCOMES

        for task, t in data["tasks"].items():
            if "ledger" not in t:
                continue
            c = counts(t["ledger"]["claims"])
            lines.append(f"| [{task}](docs/results.md#{task}): {t['ledger']['source']['title']} | "
                         + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
        lines += ["", f"From {_where(data)}."]
    else:
        lines.append("No ledger judged yet: `make repro` writes it.")
    return "\n".join([*lines, "", CLAIMS_END])


def source_study(data: dict) -> dict:
    """docs/modular-source.json from the results (docs/results.json) of a workspace whose params
    ran the modular-source target (sanity=source): where its runs ran, modular's cells, and the
    verdicts of the claims that target tests."""
    if "modular-source" not in data.get("targets", []):
        raise ValueError("results.json: its params ran no modular-source target "
                         "(compose them with sanity=source)")
    modular = data["tasks"]["modular"]
    tested = [c for c in modular.get("ledger", {}).get("claims", [])
              if "modular-source" in c.get("profiles", []) and c.get("outcome")]
    return {"target": "modular-source", "profile": data["profile"], "runs": data.get("runs"),
            "origin": data["origin"], "cells": modular["cells"], "claims": tested}
