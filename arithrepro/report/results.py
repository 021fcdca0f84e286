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
    return {"profile": profile, "runs": int(len(df)), "origin": origin(origins),
            "claims": counts(judged),
            "seconds": {k: float(df[k].sum()) for k in ("train_seconds", "eval_seconds")
                        if k in df},
            # what each task costs, in the order the headline lists them
            "task_seconds": {task: {k: float(df.loc[df["task"] == task, k].sum())
                                    for k in ("train_seconds", "eval_seconds") if k in df}
                             for task in headline if (df["task"] == task).any()},
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
    """'12 reproduced (4 at the source's setting, 8 on a stand-in), 3 not reproduced (…), …, 6
    consistency checks (all hold), 40 not tested here (24 need the paper profile, …)'."""
    from arithrepro.claims import CONSISTENCY, REASONS, SOURCE, STAND_IN, total
    from arithrepro.findings.base import OUTCOMES, REPRODUCED, UNTESTED

    said = []
    for o in OUTCOMES:
        n = total(c, o)
        if o == UNTESTED:
            parts = [f"{k} {REASONS[r].replace('needs', 'need') if k != 1 else REASONS[r]}"
                     for r in REASONS if (k := c.get(o, {}).get(r, 0))]
        else:
            parts = [f"{k} {cls}" for cls in (SOURCE, STAND_IN) if (k := c.get(o, {}).get(cls, 0))]
        said.append(f"{n} {o}" + (f" ({', '.join(parts)})" if n and parts else ""))
    held = c.get("consistency", {})
    n = sum(held.values())
    fails = n - held.get(REPRODUCED, 0)
    said.insert(-1, f"{n} {CONSISTENCY}{'s' * (n != 1)}" + (
        "" if not n else " (all hold)" if not fails else f" ({fails} not holding)"))
    return ", ".join(said)


def verdict_cell(r: dict) -> str:
    """A tested claim's verdict as its row reads: the word, its class, the stand-in's difference
    or why it is a consistency check, and the rule it was decided by."""
    from arithrepro.claims import CONSISTENCY, STAND_IN
    from arithrepro.findings.base import verdict_word

    word = verdict_word(r)
    if r.get("class"):
        word += f", {r['class']}"
    decider = next((j for j in r.get("judged") or [] if j["set"] == r.get("via")
                    and not j.get("watched") and not j.get("setting")), None)
    if decider and r.get("class") == STAND_IN:
        word += f" ({decider['stand_in']})"
    elif decider and r.get("class") == CONSISTENCY:
        word += f" ({decider['consistency']})"
    return word + (f": {r['why']}" if r.get("why") else "")


def runs_cell(r: dict) -> str:
    """Which run sets judged the claim, the deciding one first: each one's provenance, other code
    and watched seeds named; the others' verdicts beside."""
    from arithrepro.findings.base import verdict_word

    judged = sorted(r.get("judged") or [], key=lambda j: (
        j["set"] != r.get("via") or bool(j.get("watched")) or bool(j.get("setting")),
        bool(j.get("watched"))))
    out = []
    for j in judged:
        role = ("decides" if j["set"] == r.get("via") and not j.get("watched")
                and not j.get("setting") else
                "watched seeds, decides nothing" if j.get("watched") else "beside")
        head = f"**{j['set']}" + (f" @ {j['setting']}" if j.get("setting") else "") + f"** ({role}"
        if role != "decides":
            head += f": {verdict_word(j)}, {j['class']}" + (f", {j['ours']}" if j.get("ours") else "")
        head += ")"
        out.append(f"{head}: {j['where']}" + (f"; **other code**, {j['other_code']}"
                                               if j.get("other_code") else ""))
    return "; ".join(out) or "–"


def ledger_section(task: str, ledger: dict | None) -> list[str]:
    """The source's claims (claims/<task>.yaml): the tested ones with the source's number, ours,
    the verdict and its class, and the run sets it rests on; the untested folded by reason, the
    settings folded."""
    from arithrepro.claims import REASONS, counts
    from arithrepro.findings.base import UNTESTED

    if not ledger:
        return []
    src, rows = ledger["source"], ledger["claims"]
    judged = [r for r in rows if r["outcome"] not in (None, UNTESTED)]
    lines = [f"### The source's claims: {src['title']}", "",
             f"Source {src['file']} ([claims/{task}.yaml](../claims/{task}.yaml)): "
             f"{src['carries']} Of its {sum(r['outcome'] is not None for r in rows)} claims: "
             f"{counts_words(counts(rows))}.", ""]
    if src.get("watched"):
        w = src["watched"]
        lines += [f"Seeds {', '.join(map(str, w['seeds']))} are watched: {w['why']}", ""]
    if judged:
        lines += ["| claim | in the source | the source's number | ours | verdict | run sets |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {_cell(r['claim'])} | {_cell(r['where'])} | {_cell(r['source'])} | "
                  f"{_cell(r['ours'] or '–')} | {_cell(verdict_cell(r))} | {_cell(runs_cell(r))} |"
                  for r in judged]
    for reason, words in REASONS.items():
        left = [r for r in rows if r["outcome"] == UNTESTED and r.get("reason") == reason]
        if left:
            lines += ["", f"<details><summary>Not tested here, {words} ({len(left)})</summary>",
                      "", "| claim | in the source | the source's number | why, and what it would take |",
                      "|---|---|---|---|"]
            lines += [f"| {_cell(r['claim'])} | {_cell(r['where'])} | {_cell(r['source'])} | "
                      f"{_cell(r['why'])}"
                      + (f" Beside: {_cell(runs_cell(r))}" if r.get("judged") else "") + " |"
                      for r in left]
            lines += ["", "</details>"]
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
    """A task's findings: the claim each checks and its stated test, which the ledger's rows
    name; their verdicts stand on those rows, one per claim."""
    if not findings:
        return []
    lines = ["| finding | claim | test |", "|---|---|---|"]
    for f in findings:
        lines.append(f"| {f['id']} | {f['claim']} | {f.get('test', f.get('target'))} |")
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
    """The README's first-screen count of the sources' claims by verdict and class, per source."""
    from arithrepro.claims import SOURCE, STAND_IN, counts, total
    from arithrepro.findings.base import (CLOSE, DIFFERS, NOT_REPRODUCED, REPRODUCED, SMALL,
                                          UNTESTED)

    lines = [CLAIMS_START, ""]
    every = data.get("claims")
    if every and _before_classes(data):
        lines += _counted_before_classes(data)
    elif every:
        lines += [f"The sources' claims, each judged over seeds no recipe was tuned on, by a stated "
                  f"test ([docs/verdicts.md](docs/verdicts.md); every row: [docs/results.md]"
                  f"(docs/results.md), the ledger: [claims/](claims)): **{counts_words(every)}**; "
                  f"{every.get('settings', 0)} more are settings the project follows or departs "
                  "from, each named. A verdict at the source's setting ran the source's data, "
                  "model and budget; one on a stand-in ran a smaller setting, named on its row.",
                  "", "| source | reproduced (source's setting / stand-in) | not reproduced | "
                  "too close to call | differs between machines | n too small | consistency "
                  "checks | not tested here |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for task, t in data["tasks"].items():
            if "ledger" not in t:
                continue
            c = counts(t["ledger"]["claims"])
            split = lambda o: (f"{c[o].get(SOURCE, 0)} / {c[o].get(STAND_IN, 0)}")  # noqa: E731
            lines.append(f"| [{task}](docs/results.md#{task}): {t['ledger']['source']['title']} | "
                         f"{split(REPRODUCED)} | {split(NOT_REPRODUCED)} | {split(CLOSE)} | "
                         f"{split(DIFFERS)} | {total(c, SMALL)} | {total(c, 'consistency')} | "
                         f"{total(c, UNTESTED)} |")
        lines += ["", f"From {_where(data)}."]
    else:
        lines.append("No ledger judged yet: `make repro` writes it.")
    return "\n".join([*lines, "", CLAIMS_END])


def _before_classes(data: dict) -> bool:
    """A results.json written before verdicts had classes (its counts a number per outcome)."""
    return any(isinstance(v, int) for k, v in data["claims"].items() if k != "settings")


def _counted_before_classes(data: dict) -> list[str]:
    """The README's count from a results.json written before verdict classes: its own counts,
    said to be that, until `make repro` judges the claims again."""
    c = data["claims"]
    words = ", ".join(f"{c.get(o, 0)} {o}" for o in
                      ("reproduced", "not reproduced", "too close to call", "not tested here"))
    commits = ", ".join(str(x)[:7] for x in data["origin"]["commit"])
    lines = [f"The sources' claims as the runs of commit {commits} were judged, before verdicts "
             "had classes (at the source's setting, on a stand-in, consistency checks) and the "
             f"rules of [docs/verdicts.md](docs/verdicts.md): **{words}**; {c.get('settings', 0)} "
             "more are settings the project follows or departs from, each named "
             "([claims/](claims), [docs/results.md](docs/results.md)). `make repro` judges them "
             "again by those rules.", "",
             "| source | reproduced | not reproduced | too close to call | not tested here |",
             "|---|---:|---:|---:|---:|"]
    for task, t in data["tasks"].items():
        if "ledger" in t:
            outcomes = [r["outcome"] for r in t["ledger"]["claims"]]
            lines.append(f"| [{task}](docs/results.md#{task}): {t['ledger']['source']['title']} | "
                         + " | ".join(str(outcomes.count(o)) for o in
                                      ("reproduced", "not reproduced", "too close to call",
                                       "not tested here")) + " |")
    return [*lines, "", f"From {_where(data)}."]


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
