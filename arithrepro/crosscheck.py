"""`arithrepro crosscheck`: the findings again, under another CPU capability and thread count.

The workspace's params, with `cpu.capability` and `cpu.threads` set, run in a scratch copy of
the workspace that shares its DVC cache: every cell the findings read trains and is scored
there as an ordinary DVC cell (another cell than the workspace's, since its `cpu` params
differ), so a second crosscheck of the same setting restores it from the run cache, and
`dvc push` carries it like any other. Then each task's findings are checked on those records
(arithrepro/findings/) and written beside the workspace's own:

- docs/crosscheck/<capability>-t<threads>.json: the setting, where it ran, each task's cells
  (mean, std and n of its headline metrics), findings and the workspace's commit they ran at; a
  later check of some tasks replaces those tasks and keeps the others;
- docs/crosscheck.md: per task and finding, whether it holds and on what, a column per setting,
  the workspace's own runs first (from its records, as the results page reads them);
- README.md's crosscheck block, where the README has one: each finding's verdict in each
  setting, and whether every setting agrees with the workspace's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import yaml

from arithrepro.checkout import copy_checkout, working_dir

DOCS = Path("docs")
PAGE = DOCS / "crosscheck.md"
FOLDER = DOCS / "crosscheck"
README = Path("README.md")
README_START = ("<!-- crosscheck: written by `arithrepro crosscheck` from docs/crosscheck/*.json; "
                "edit nothing here -->")
README_END = "<!-- /crosscheck -->"


def label(setting: dict) -> str:
    """<capability>-t<threads>, and a short hash of the params overrides when there are any."""
    import hashlib

    base = f"{setting['capability']}-t{setting['threads']}"
    sets = setting.get("set") or []
    return base + (f"-{hashlib.sha256(' '.join(sets).encode()).hexdigest()[:8]}" if sets else "")


def scratch_copy(root: Path, dest: Path) -> Path:
    """The workspace's files that git tracks or would (no outputs) in a fresh repository at
    `dest`, with the workspace's DVC cache as its cache."""
    copy_checkout(root, dest, "crosscheck")
    subprocess.run([sys.executable, "-m", "dvc", "cache", "dir", "--local",
                    str(root / ".dvc" / "cache")], cwd=dest, check=True, capture_output=True)
    return dest


@contextmanager
def scratch(root: Path, workdir: Path | None, prefix: str, keep: bool):
    """A scratch copy of the workspace (scratch_copy) in a new folder under `workdir` for the
    block; removed after it, unless `keep` or the block failed (what failed stays to be read)."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))
    dest = base / "workspace"
    dest.mkdir()
    try:
        yield scratch_copy(root, dest)
    except BaseException:
        keep = True
        raise
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


def task_report(params: dict, tasks: list[str]) -> dict:
    """{task: {cells, findings}} from the records the params name, in the working directory."""
    from arithrepro.findings.base import verdicts
    from arithrepro.findings.registry import FINDINGS
    from arithrepro.report.results import collect
    from arithrepro.report.tables import wanted_runs
    from arithrepro.tasks.registry import REPORTS

    df = wanted_runs(params, tasks)
    found = {n: verdicts(FINDINGS.get(n, ()), df[df["task"] == n], params) for n in tasks}
    data = collect(df, {n: REPORTS[n] for n in tasks}, [],
                   params["profile"], found)
    origin = {k: sorted({str(v) for v in df[k].dropna()}) for k in ("machine", "cpu_capability",
                                                                       "threads") if k in df}
    for name, task in data["tasks"].items():
        rows = df[df["task"] == name]
        task["commit"] = " ".join(sorted({str(c)[:7] for c in rows["commit"].dropna()})) \
            if "commit" in rows else ""
        task["seeds"] = sorted({int(s) for s in rows["seed"]})
    return {"origin": origin, "tasks": data["tasks"]}


# what the runs are made of (the generated results beside them are not)
RUN_INPUTS = ["arithrepro", "stages", "conf", "params.yaml", "dvc.yaml"]


def head(root: Path) -> str:
    """The workspace's commit, short, and "+changes" when what the runs are made of differs
    from it."""
    git = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True, text=True)
    sha = git("rev-parse", "--short=7", "HEAD").stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", *RUN_INPUTS).stdout.strip()
    return sha + ("+changes" if sha and dirty else "")


def on_record() -> list[str]:
    """The tasks some setting's file in docs/crosscheck/ holds."""
    files = sorted(FOLDER.glob("*.json")) if FOLDER.is_dir() else []
    return sorted({t for p in files for t in json.loads(p.read_text())["tasks"]})


def with_tasks_on_record(own: dict, params: dict) -> dict:
    """`own` with the workspace's report of every other task a setting's file holds, where the
    workspace has that task's records (the page shows a task beside the workspace's own)."""
    from arithrepro.io import ArtifactError

    tasks = dict(own["tasks"])
    for task in on_record():
        if task not in tasks:
            try:
                tasks[task] = task_report(params, [task])["tasks"][task]
            except ArtifactError:   # a damaged record stops it, as anywhere
                raise
            except (FileNotFoundError, ValueError):   # no records of it here: not shown
                pass
    from arithrepro.tasks.registry import TASKS

    order = list(TASKS)   # the registry's order, whichever tasks were just checked
    return {**own, "tasks": dict(sorted(tasks.items(), key=lambda kv: order.index(kv[0])))}


def run(params: dict, setting: dict, tasks: list[str], root: Path, workdir: Path | None,
        keep: bool, echo=print) -> dict:
    """Train and score the tasks' cells under `setting` in a scratch copy; return its report."""
    with scratch(root, workdir, "arithrepro-crosscheck-", keep) as copy:
        if setting.get("set"):   # as `dvc exp run -S` composes: conf/, the profile, the overrides
            from arithrepro import config

            params = config.compose([f"profile={params['profile']}", *setting["set"]], root / "conf")
        changed = {**params, "cpu": {"capability": setting["capability"], "threads": setting["threads"]}}
        (copy / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
        from arithrepro.pipeline import finding_stages

        targets = finding_stages(tasks)   # what the findings read, their own files included
        echo(f"crosscheck {label(setting)}: {', '.join(tasks)} in {copy}")
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        code = subprocess.call([sys.executable, "-m", "arithrepro.cli", "repro", *targets],
                               cwd=copy, env=env)
        if code:
            raise ValueError(f"crosscheck {label(setting)}: the runs failed (exit {code}); "
                             f"the scratch copy stays, its logs in {copy}/logs/repro")
        with working_dir(copy):
            report = task_report(changed, tasks)
        for task in report["tasks"].values():   # the scratch repository's commit names nothing
            task["commit"] = head(root)
    return {"setting": setting, "profile": params["profile"], **report}


def page(own: dict, others: list[dict]) -> str:
    """docs/crosscheck.md: per task, a row per finding, a column per setting."""
    from arithrepro.findings.base import verdict_word

    columns = [("this workspace", own), *((label(o["setting"]), o) for o in others)]
    lines = ["# Findings on other CPUs", "",
             "Written by `arithrepro crosscheck` from the run records; edit nothing here. Each "
             "column: the findings checked on runs of one setting of `cpu` (the vector unit "
             "torch's kernels used, and the threads per run), every other param the "
             "workspace's unless the setting's row lists it.", ""]
    lines += ["| setting | ran on | capability | threads | params changed |", "|---|---|---|---|---|"]
    for name, data in columns:
        o = data["origin"]
        sets = " ".join(f"`{x}`" for x in data.get("setting", {}).get("set") or []) or "–"
        lines.append(f"| {name} | {' / '.join(o.get('machine', [])) or '–'} | "
                     f"{' / '.join(o.get('cpu_capability', [])) or '–'} | "
                     f"{' / '.join(o.get('threads', [])) or '–'} | {sets} |")
    lines.append("")
    tasks = checked(own, others) or list(own["tasks"])
    for task in tasks:
        lines += [f"## {task}", "", "Commit: " + "; ".join(
            f"{name} {commits(data, task)}" for name, data in columns if task in data["tasks"]), ""]
        header = ["finding", *(name for name, _ in columns)]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        claims = [_key(f) for f in own["tasks"].get(task, {}).get("findings", [])]
        for claim in claims:
            row = [_claim(own, task, claim)]
            for _, data in columns:
                f = finding(data, task, claim)
                row.append(f"{verdict_word(f)}: {f['measured']}" if f else "not run")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)


def merged(earlier: dict | None, result: dict) -> dict:
    """A setting's record after `result`: its tasks replace the earlier ones, the earlier
    file's other tasks stay (each with the commit it ran at), and where they ran is the union."""
    if earlier is None:
        return result
    tasks = {**earlier["tasks"], **result["tasks"]}
    keys = {*earlier.get("origin", {}), *result["origin"]}
    origin = {k: sorted({*earlier.get("origin", {}).get(k, []), *result["origin"].get(k, [])})
              for k in keys}
    return {**result, "origin": origin, "tasks": tasks}


def commits(data: dict, task: str) -> str:
    return data["tasks"].get(task, {}).get("commit") or "not recorded"


def checked(own: dict, others: list[dict]) -> list[str]:
    """The workspace's tasks that some other setting checked."""
    return [t for t in own["tasks"] if any(t in o["tasks"] for o in others)]


def _key(f: dict) -> str:
    """What names a finding across settings: its id (records written before ids: its claim)."""
    return f.get("id") or f["claim"]


def _claim(data: dict, task: str, key: str) -> str:
    f = finding(data, task, key)
    return f["claim"] if f else key


def finding(data: dict, task: str, key: str) -> dict | None:
    return next((f for f in data["tasks"].get(task, {}).get("findings", [])
                 if _key(f) == key), None)


def readme_block(own: dict, others: list[dict]) -> str:
    """README.md's crosscheck block: a row per task and finding, the verdict in each setting
    (the words of docs/crosscheck.md without the numbers), and whether they all agree."""
    from arithrepro.findings.base import verdict_word

    if not others:
        return "\n".join([README_START, "", "No other setting checked yet.", "", README_END])
    columns = [("this workspace", own), *((label(o["setting"]), o) for o in others)]
    tasks = checked(own, others)
    header = ["task", "finding", *(name for name, _ in columns), "same verdict"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    agree = total = alone = 0
    for task in tasks:
        for claim in (_key(f) for f in own["tasks"][task].get("findings", [])):
            words = []
            for _, d in columns:
                f = finding(d, task, claim)
                words.append(verdict_word(f) if f else "not run")
            ran = [w for w in words if w != "not run"]
            if len(ran) < 2:   # no other setting checked it: nothing to agree or disagree
                rows.append(f"| {task} | {_claim(own, task, claim)} | " + " | ".join(words)
                            + " | not checked elsewhere |")
                alone += 1
                continue
            same = len(set(ran)) == 1
            agree, total = agree + same, total + 1
            rows.append(f"| {task} | {_claim(own, task, claim)} | " + " | ".join(words)
                        + f" | {'yes' if same else '**no**'} |")
    ran = " and ".join(sorted({d["origin"].get("machine", ["–"])[0] for _, d in columns}))
    where = []
    for name, data in columns:
        by_commit = {}
        for t in tasks:
            if t in data["tasks"]:
                by_commit.setdefault(commits(data, t), []).append(t)
        where.append(f"{name}: " + "; ".join(f"{', '.join(ts)} at {c}" for c, ts in by_commit.items()))
    later = f" ({alone} more not checked in another setting yet)" if alone else ""
    head = (f"{agree} of {total} findings give the same verdict in every setting{later}" if total
            else f"None of the {alone} findings is checked in another setting yet")
    summary = (f"{head}, on {ran}; "
               "the numbers beside each verdict are on [docs/crosscheck.md](docs/crosscheck.md). "
               "Commits: " + ". ".join(where) + ".")
    return "\n".join([README_START, "", summary, "", *rows, "", README_END])


def write(own: dict, result: dict | None) -> list[Path]:
    """The setting's JSON (when one ran), the page over every setting on record, and the
    README's block where the README has one."""
    from arithrepro.io import write_json, write_text
    from arithrepro.report.results import with_block

    written = []
    if result is not None:
        path = FOLDER / f"{label(result['setting'])}.json"
        write_json(path, merged(json.loads(path.read_text()) if path.is_file() else None, result))
        written.append(path)
    others = [json.loads(p.read_text()) for p in sorted(FOLDER.glob("*.json"))] if FOLDER.is_dir() else []
    write_text(PAGE, page(own, others))
    written.append(PAGE)
    readme = README.read_text() if README.is_file() else ""
    if README_START in readme:
        write_text(README, with_block(readme, readme_block(own, others), README_START, README_END))
        written.append(README)
    return written
