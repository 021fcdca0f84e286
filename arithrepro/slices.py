"""`arithrepro paper-slice`: a profile's runs of some tasks, made where that profile fits (the
paper profile's modular studies and looped grid on one GPU), carried to every other page.

In a scratch copy of this workspace that shares its DVC cache (as `arithrepro crosscheck`
makes one), the params are composed from conf/ with the profile and the overrides, and
`arithrepro repro` runs the stages that write what the tasks' findings read (their records,
and the files the checks read beside them). The runs are ordinary DVC cells, cached and pushed
like any other. Then `arithrepro results --slice` judges the claims that profile tests on them
and writes docs/runsets/<target>.json into this workspace: per task, where the runs ran
(commit, tree, GPU or CPU, torch), their seeds, and the verdicts, those on seeds a recipe was
watched on apart. Every results page of another profile reads it as that profile's run set
(arithrepro/runsets.py, `sliced`, which reads the file through `slice_file`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

# The source's two seeds decide nothing (claims/modular.yaml: watched while recipes were
# chosen); three that chose nothing run beside them.
DEFAULT_SET = ("modular.seeds=[0,42,100,101,102]",)
DEFAULT_TASKS = ("modular", "looped")


def run(profile: str, overrides: list[str], tasks: list[str], root: Path, out: Path,
        repro_args: list[str], workdir: Path | None = None, keep: bool = False,
        echo=print) -> Path:
    """Train the tasks' runs of `profile` with `overrides` in a scratch copy of `root` and write
    `out` from them; returns `out`."""
    from arithrepro import config
    from arithrepro.crosscheck import scratch
    from arithrepro.pipeline import finding_stages

    params = config.compose([f"profile={profile}", *overrides], root / "conf")   # refusals first
    with scratch(root, workdir, "arithrepro-slice-", keep) as copy:
        (copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        stages = finding_stages(tasks)
        echo(f"{out.stem}: profile {profile}, {', '.join(tasks)} ({len(stages)} stages) in {copy}")
        cli = [sys.executable, "-m", "arithrepro.cli"]
        code = subprocess.call([*cli, "repro", *repro_args, *stages], cwd=copy)
        if code:
            raise ValueError(f"{out.stem}: the runs failed (exit {code}); the scratch copy "
                             f"stays, its logs in {copy}/logs/repro")
        code = subprocess.call([*cli, "results", "--slice", str(out.resolve()),
                                *(a for t in tasks for a in ("--task", t))], cwd=copy)
        if code:
            raise ValueError(f"{out.stem}: judging the runs failed (exit {code}) in {copy}")
    return out


def slice_study(params: dict, tasks: list[str], target: str) -> dict:
    """A run set a committed file carries (docs/runsets/<target>.json) from this workspace's
    records of `tasks` under the params' profile (`make paper-slice`: the paper profile's
    modular and looped on a GPU): per task, where its runs ran (commit, tree, GPU or CPU,
    torch), the seeds, and the verdicts of the claims that profile tests, those on seeds a
    recipe was watched on apart."""
    from arithrepro import claims, runsets
    from arithrepro.findings.base import UNTESTED, verdicts
    from arithrepro.findings.registry import FINDINGS
    from arithrepro.report.results import origin
    from arithrepro.report.tables import wanted_runs

    profile = params["profile"]
    ledgers = {n: claims.load(n) for n in tasks}   # checked before any work
    df = wanted_runs(params, tasks)
    out = {"target": target, "profile": profile, "tasks": {}}
    for n in tasks:
        ledger = ledgers[n]
        rows = df[df["task"] == n]
        origins = runsets.trained_where(n, params)
        sets = [s for s in runsets.own(n, rows, origins, params, ledger,
                                       lambda some, n=n: verdicts(FINDINGS.get(n, ()), some, params))
                if s.name == profile]
        judged = {v["id"]: v for v in claims.verdicts(ledger, sets)}
        tested = [c for c in ledger["claims"] if profile in (c.get("test") or {}).get("profiles", [])]

        def picked(seen: bool) -> list[dict]:
            got = []
            for c in tested:
                j = next((j for j in judged[c["id"]]["judged"] if bool(j["watched"]) == seen), None)
                if j is not None and j["outcome"] != UNTESTED:
                    got.append({"id": c["id"], "claim": c["claim"],
                                **{k: j.get(k) for k in ("outcome", "ours", "n", "why", "class")}})
            return got

        watched = claims.watched_seeds(ledger["source"])
        seeds = sorted({int(s) for s in rows["seed"]}) if len(rows) else []
        entry = {"runs": len(rows), "origin": origin(origins),
                 "seeds": [s for s in seeds if s not in watched], "claims": picked(False)}
        if watched & set(seeds):
            entry["watched"] = {"seeds": sorted(watched & set(seeds)), "claims": picked(True)}
        out["tasks"][n] = entry
    return out


def merged(old: dict | None, new: dict) -> dict:
    """`new` (slice_study's) over the slice file's `old` content: the tasks it ran replace
    theirs, and the file's other tasks stay where it holds the same profile, so GPU windows too
    short for every task add theirs one by one (looped in one, modular in another). A file of
    another profile is replaced whole."""
    if old is None or old["profile"] != new["profile"]:
        return new
    return {**new, "tasks": {**{t: v for t, v in old["tasks"].items() if t not in new["tasks"]},
                             **new["tasks"]}}
