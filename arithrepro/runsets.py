"""The run sets a results page judges claims on, each with where its runs came from.

A run set is either this workspace's records for the params' profile (and the named targets
those params run), or a named target's verdicts carried in a committed file
(docs/runsets/modular-source.json; docs/runsets/paper-slice.json, the paper profile's modular
and looped runs on a GPU). Each says its commit, tree, machine, threads and seeds in words;
one made by code other than this page's commit, in the files its stages run (their code-deps),
says so on every row it judges, and this workspace's own records from other code are refused.
The seeds a ledger marks as watched (`source.watched`: seeds a recipe was chosen on) form a run
set of their own, reported beside and never deciding.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from arithrepro.claims import RunSet, watched_seeds
from arithrepro.io import ArtifactError

CARRIED = {"modular-source": Path("docs/runsets/modular-source.json")}
# what `make modular-source` runs (sanity=source changes the sanity study alone): the claims it
# tests read these stages' outputs and nothing else
SOURCE_STAGES = ("train-modular-sanity", "modular-attention")
# a profile's runs of some tasks made elsewhere (`make paper-slice` on a GPU): they judge the
# claims of that profile, under its name, on every page but that profile's own
SLICES = {"paper-slice": Path("docs/runsets/paper-slice.json")}
ESTIMATE = Path("docs/runsets/estimate-paper.json")
# the stage commands whose code a run's numbers depend on
RUN_COMMANDS = ("generate-datasets", "charlm-corpus", "train", "evaluate")


def trained_where(task: str, params: dict, stages: tuple[str, ...] = ()) -> list[dict]:
    """Each of the task's runs the params name (of the train `stages` alone, where given): its
    record's training provenance (commit, tree, machine, torch), {} where the record has none."""
    from arithrepro.io import read_json
    from arithrepro.tasks.registry import wanted

    return [(read_json(run.files.record).get("provenance") or {}).get("train", {})
            for run in wanted(task, params, stages)]


def own(task: str, rows, origins: list[dict], params: dict, ledger: dict, judge) -> list[RunSet]:
    """This workspace's records of `task` as run sets, one per name they count for (the profile,
    and each target the params run), the watched seeds apart. `judge(rows)`: the task's
    findings on some rows. ArtifactError when the records come from other code."""
    names = [params["profile"], *params["claims"]["targets"]]
    watched = watched_seeds(ledger["source"])
    seeds = set(rows["seed"]) if len(rows) else set()
    kept = rows[~rows["seed"].isin(watched)] if len(rows) else rows
    other = other_code(task, origins, uncommitted=False, unknown=False)
    if other:
        raise ArtifactError(f"metrics/{task}", f"records {other}; re-run `arithrepro repro` (or "
                            "`dvc repro`) so that they come from this code")
    where = where_words(origins, sorted(seeds - watched))
    sets = [RunSet(name, kept, judge(kept), where=where) for name in names]
    if watched & seeds:
        seen = rows[rows["seed"].isin(watched)]
        sets += [RunSet(name, seen, judge(seen), where=where_words(origins, sorted(watched & seeds)),
                        watched=True) for name in names[1:]]
    return sets


def carried(task: str, names: list[str], ledger: dict, head: str | None = None) -> list[RunSet]:
    """The named targets' run sets whose verdicts a committed file carries (CARRIED), except
    those the page's own records already are (`names`). A file whose deciding seeds include the
    ledger's watched ones is itself reported as watched: it decides nothing. `head`: the commit
    whose code the page's own runs ran (other_code), HEAD by default."""
    from arithrepro.io import read_json

    watched = watched_seeds(ledger["source"])
    out = []
    for target, path in CARRIED.items():
        if target in names or not path.is_file():
            continue
        data = read_json(path, ("claims", "origin", "cells"))
        if data.get("task", "modular") != task:
            continue
        other = other_code(task, _runs_of(data["origin"]), head=head)
        seeds = data.get("seeds") or sorted({int(s) for c in data["cells"] for s in c.get("seeds", {})})
        where = _origin_words(data["origin"], seeds)
        mixed = watched & set(seeds)
        if mixed:
            where += f" (seeds {seed_words(mixed)} watched while a recipe was chosen)"
        out.append(RunSet(target, carried=_verdicts(data["claims"]), where=where,
                          other_code=other, watched=bool(mixed)))
        if data.get("watched"):
            w = data["watched"]
            o = w.get("origin", data["origin"])   # its own runs' where a later run added them
            out.append(RunSet(target, carried=_verdicts(w["claims"]),
                              where=_origin_words(o, w["seeds"]), watched=True,
                              other_code=other_code(task, _runs_of(o), head=head)))
    return out + sliced(task, names, head)


def published(rows: list[dict]) -> list[RunSet]:
    """The page's own run sets as a published page judged them: from one task's ledger rows in
    docs/results.json, each set's verdict on each claim as the page gave it, in the order the
    page judged them. The sets read from files (CARRIED, SLICES, crosschecks) are left out:
    `arithrepro results --rejudge` reads those files again."""
    from_files = tuple(f"`make {t}`:" for t in SLICES)
    sets: dict = {}
    for row in rows:
        for j in row.get("judged") or []:
            if j["set"] in CARRIED or j.get("setting") or j["where"].startswith(from_files):
                continue
            key = (j["set"], j["where"], j["other_code"], j["watched"])
            s = sets.setdefault(key, RunSet(j["set"], where=j["where"], other_code=j["other_code"],
                                            watched=j["watched"]))
            s.carried[row["id"]] = {k: j[k] for k in ("outcome", "ours", "n", "why")}
    return list(sets.values())


def _runs_of(origin: dict) -> list[dict]:
    """A carried file's origin block ({commit: [...], dirty: [...]}) as other_code reads runs."""
    return [{"commit": c, "dirty": d} for c in origin.get("commit", []) for d in origin.get("dirty", [])]


def slice_file(path: Path) -> dict | None:
    """The slice file already at `path` (None: none there), checked before any work: an
    unreadable one stops the write, named."""
    from arithrepro.io import read_json

    if not path.is_file():
        return None
    old = read_json(path, ("profile", "tasks"))
    if not isinstance(old["tasks"], dict):
        raise ArtifactError(path, "tasks: expected an object of task -> run set")
    return old


def sliced(task: str, names: list[str], head: str | None = None) -> list[RunSet]:
    """The run sets of `task` that a slice file carries (SLICES), named after the profile it
    ran, unless the page's own records are that profile's; its watched seeds apart."""
    out = []
    for target, path in SLICES.items():
        data = slice_file(path)
        if data is None:
            continue
        t = data["tasks"].get(task)
        if not t or data["profile"] in names:
            continue
        for key in ("origin", "seeds", "claims"):
            if key not in t:
                raise ArtifactError(path, f"tasks.{task}: no {key!r}")
        o = t["origin"]
        other = other_code(task, _runs_of(o), head=head)
        out.append(RunSet(data["profile"], carried=_verdicts(t["claims"]), other_code=other,
                          where=f"`make {target}`: " + _origin_words(o, t["seeds"])))
        if t.get("watched"):
            w = t["watched"]
            out.append(RunSet(data["profile"], carried=_verdicts(w["claims"]), other_code=other,
                              where=f"`make {target}`: " + _origin_words(o, w["seeds"]),
                              watched=True))
    return out


CROSSCHECK = Path("docs/crosscheck")


def crosschecks(task: str, profile: str, ledger: dict, head: str | None = None,
                own: dict | None = None) -> list[RunSet]:
    """The page's profile run again under another CPU capability or thread count
    (`arithrepro crosscheck`, docs/crosscheck/<setting>.json): one run set per setting that
    checked `task` with findings named by id, judging the claims those findings test. `own`:
    the page's own runs' origin ({cpu_capability: [...], threads: [...]}); a file run at the
    same capability and thread count checks nothing and is left out, with a warning."""
    import warnings

    from arithrepro.crosscheck import label
    from arithrepro.io import read_json

    out = []
    for path in sorted(CROSSCHECK.glob("*.json")) if CROSSCHECK.is_dir() else []:
        data = read_json(path, ("setting", "origin", "tasks"))
        t = data["tasks"].get(task)
        if not t or data.get("profile") != profile \
                or not all("id" in f for f in t.get("findings", [])):
            continue
        if own and _same_setting(data["origin"], own):
            warnings.warn(f"{path}: run at this page's own vector unit and thread count "
                          f"({', '.join(own['cpu_capability'])}, {_words(own['threads'])} "
                          "thread(s)), so it checks nothing; left out")
            continue
        found = {f["id"]: f for f in t["findings"]}
        carried = {c["id"]: {"outcome": f["outcome"], "ours": f["measured"], "n": f["n"],
                             "why": f"finding {f['id']}"}
                   for c in ledger["claims"] if (f := found.get((c.get("test") or {}).get("finding")))}
        commit = str(t.get("commit", ""))
        dirty = commit.endswith("+changes")
        origins = [{"commit": commit.removesuffix("+changes"), "dirty": dirty}] if commit else []
        o = data["origin"]
        where = _origin_words({"commit": [c["commit"] for c in origins], "dirty": [dirty],
                               "cpu": o.get("machine", []), "cpu_capability": o.get("cpu_capability", []),
                               "threads": o.get("threads", [])}, t.get("seeds", []))
        out.append(RunSet(profile, carried=carried, where=where,
                          other_code=other_code(task, origins, head=head),
                          setting=label(data["setting"])))
    return out


def _same_setting(cross: dict, own: dict) -> bool:
    def values(o: dict, key: str) -> set:
        return {str(v).upper() for v in o.get(key) or [] if v is not None}
    return all(values(own, k) and values(cross, k) == values(own, k)
               for k in ("cpu_capability", "threads"))


def _words(values: list) -> str:
    return "/".join(str(v) for v in values)


def _verdicts(claims: list[dict]) -> dict:
    from arithrepro.findings.base import UNTESTED

    return {c["id"]: {k: c.get(k) for k in ("outcome", "ours", "n", "why")}
            for c in claims if c.get("outcome") not in (None, UNTESTED)}


def where_words(origins: list[dict], seeds: list[int]) -> str:
    """'commit 9d23111 (clean), AMD EPYC (AVX2), 1 thread, torch 2.13.0+cpu, seeds 100-104'."""
    from arithrepro.report.results import origin

    return _origin_words(origin(origins), seeds)


def _origin_words(o: dict, seeds: list[int]) -> str:
    def joined(key: str, sep: str = " / ") -> str:
        return sep.join(str(v) for v in o.get(key, []) if v is not None)

    commits = ", ".join(str(c)[:7] for c in o.get("commit", []) if c) or "no commit"
    tree = "with uncommitted changes" if True in o.get("dirty", []) else "clean"
    machine = joined("cpu") or "an unrecorded machine"
    cap, threads, torch = joined("cpu_capability"), joined("threads"), joined("torch")
    parts = [f"commit {commits} ({tree})", machine + (f" ({cap})" if cap else "")]
    if threads:
        parts.append(f"{threads} thread{'' if threads == '1' else 's'}")
    if torch:
        parts.append(f"torch {torch}")
    parts.append(f"seeds {seed_words(seeds)}" if seeds else "no seeds")
    return ", ".join(parts)


def seed_words(seeds) -> str:
    """'0, 42, 100-104'."""
    seeds = sorted(set(int(s) for s in seeds))
    runs, out = [], []
    for s in seeds:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    for a, b in runs:
        out.append(str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}")
    return ", ".join(out)


def other_code(task: str, origins: list[dict], root: Path = Path("."),
               uncommitted: bool = True, unknown: bool = True, head: str | None = None) -> str:
    """Words saying how the runs' code differs from HEAD's (or the commit `head`'s: a published
    page's) in the files the task's run stages depend on ('' when it does not, or when there is
    no history to compare). Where `unknown`, a
    commit this clone does not hold reads as other code, and where `uncommitted`, a tree with
    uncommitted changes at another commit. This workspace's own DVC outputs, whose code DVC
    compares itself, pass False for both: a record's `dirty` counts params too, and its commit is
    that of the checkout the package was installed from, which a copy of the workspace (a
    cluster job's, a test's) does not hold."""
    head = head or _git(root, "rev-parse", "HEAD")
    if head is None:
        return ""
    head = head.strip()
    commits = sorted({o.get("commit") for o in origins if o.get("commit")})
    dirty_elsewhere = uncommitted and any(o.get("dirty") for o in origins
                                          if o.get("commit") and not head.startswith(o["commit"]))
    others = [c for c in commits if not head.startswith(c)]
    files = code_files(task, root) if others else []
    changed, missing = set(), []
    for c in others:
        if _git(root, "cat-file", "-e", f"{c}^{{commit}}") is None:
            missing.append(c[:7])
            continue
        diff = _git(root, "diff", "--name-only", c, head, "--", *files)
        changed |= set((diff or "").split())
    missing = missing if unknown else []
    if not changed and not missing and not dirty_elsewhere:
        return ""
    said = [f"from commit {', '.join(c[:7] for c in commits)}"]
    if dirty_elsewhere:
        said.append("with uncommitted changes")
    if missing:
        said.append(f"{', '.join(missing)} not in this clone's history")
    if changed:
        names = sorted(changed)
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        said.append(f"{len(names)} file{'s' * (len(names) != 1)} of their stages' code differ "
                    f"from {head[:7]} ({shown})")
    return ": ".join([said[0], "; ".join(said[1:])]) if len(said) > 1 else said[0]


def code_files(task: str, root: Path = Path(".")) -> list[str]:
    """The source files the task's data, training and evaluation stages run (code-deps)."""
    from arithrepro.imports import graph
    from arithrepro.pipeline import families
    from arithrepro.codedeps import code_files as closure

    edges = graph(Path(root))
    files: set[str] = set()
    for command, t, models in families().values():
        if t == task and command in RUN_COMMANDS:
            files |= set(closure(Path(root), command, t, edges, models))
    return sorted(files)


def estimate(path: Path = ESTIMATE) -> dict:
    """{"device": the GPU it was measured on, "tasks": {task: seconds}} of the paper profile, from
    `arithrepro estimate --profile paper --json` run on a GPU and committed; {} before it is."""
    from arithrepro.io import read_json

    if not path.is_file():
        return {}
    data = read_json(path, ("profiles",))
    tasks: dict = {}
    for row in data["profiles"].get("paper", []):
        tasks[row["task"]] = tasks.get(row["task"], 0.0) + float(row["total_s"])
    return {"device": data.get("gpu") or data.get("device") or "a GPU", "tasks": tasks}


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None
