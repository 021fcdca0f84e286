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
(arithrepro/runsets.py, `sliced`).
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


def targets(tasks: list[str]) -> list[str]:
    """The stages that write what the tasks' findings read, in dvc.yaml's names."""
    from arithrepro.findings.registry import FILES
    from arithrepro.pipeline import writers
    from arithrepro.tasks.registry import records

    inputs = [p for t in tasks for p in (*records(t), *(f for f in FILES if f.split("/")[1] == t))]
    return sorted({w for p in inputs for w in writers(p)})


def run(profile: str, overrides: list[str], tasks: list[str], root: Path, out: Path,
        repro_args: list[str], workdir: Path | None = None, keep: bool = False,
        echo=print) -> Path:
    """Train the tasks' runs of `profile` with `overrides` in a scratch copy of `root` and write
    `out` from them; returns `out`."""
    from arithrepro import config
    from arithrepro.crosscheck import scratch

    params = config.compose([f"profile={profile}", *overrides], root / "conf")   # refusals first
    with scratch(root, workdir, "arithrepro-slice-", keep) as copy:
        (copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        stages = targets(tasks)
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
