"""Adding a task is the checklist of docs/design.md ("Add a task"), done here to a clone: a toy
task (tests/extend/subtraction.py) gets its module, its registry line and its config block; the
two commands that write the generated files follow; and the real stages build, train, evaluate
and report it, running nothing of the other tasks."""

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.workspace import ROOT, make_clone, ran_stages, sh

EXTEND = Path(__file__).resolve().parent / "extend"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def checklist() -> list[str]:
    """The numbered steps of docs/design.md's "Add a task"."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Add a task", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. ", section, flags=re.M)


def test_the_checklist_is_at_most_five_edits():
    assert 3 <= len(checklist()) <= 5


def add_task(here: Path, name: str) -> None:
    """The checklist's three edits, for the toy task tests/extend/<name>.py."""
    # 1. the task's module
    shutil.copy(EXTEND / f"{name}.py", here / "arithrepro" / "tasks" / f"{name}.py")
    # 2. its line in the task registry
    registry = here / "arithrepro" / "tasks" / "registry.py"
    text = registry.read_text()
    assert "looped, modular\n" in text and '\n    "charlm": charlm,' in text
    lines = text.replace("looped, modular\n", f"looped, modular, {name}\n").split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith('    "charlm": charlm,'))
    lines.insert(at + 1, f'    "{name}": {name},')
    registry.write_text("\n".join(lines))
    # 3. its block in conf/config.yaml (no profile changes it)
    with open(here / "conf" / "config.yaml", "a") as f:
        f.write((EXTEND / f"{name}.yaml").read_text())


def test_a_new_task_runs_through_the_real_stages(tmp_path):
    here = make_clone(tmp_path)
    env = {"PYTHONPATH": str(here)}   # the clone's package, which holds the new task
    sh(["arithrepro", "compose-params", "-S", "profile=smoke"], here)
    before = set(sh(["dvc", "stage", "list", "--name-only"], here).split())
    add_task(here, "subtraction")
    # the generated files: dvc.yaml from the registries, params.yaml from conf/
    sh(["arithrepro", "pipeline"], here, **env)
    sh(["arithrepro", "compose-params", "-S", "profile=smoke"], here, **env)

    stages = set(sh(["dvc", "stage", "list", "--name-only"], here).split())
    cell = "standard-notebook-0"
    # and the benchmark's cells on it: the token models through the pairs adapter (the smoke
    # profile's one seed)
    bench = {f"{step}-bench-subtraction-{m}@0" for step in ("train", "evaluate")
             for m in ("gpt", "lstm", "retran", "abacus")}
    assert stages - before == {"generate-subtraction", f"train-subtraction@{cell}",
                               f"evaluate-subtraction@{cell}", "render-figures-subtraction", *bench}
    out = sh(["dvc", "repro", "render-figures-subtraction"], here, **env)
    assert ran_stages(out) == {"code-deps", "generate-subtraction", f"train-subtraction@{cell}",
                               f"evaluate-subtraction@{cell}", "render-figures-subtraction"}
    record = json.loads((here / "metrics" / "subtraction" / "runs" / f"{cell}.json").read_text())
    assert {"task", "params", "id_acc", "ood_acc", "train_seconds", "provenance"} <= record.keys()
    assert record["task"] == "subtraction" and 0 <= record["id_acc"] <= 1
    table = (here / "metrics" / "subtraction.md").read_text()
    assert table.startswith("### subtraction") and "| standard" in table and "id_acc" in table
    assert (here / "runs" / "subtraction" / cell / "live" / "metrics.json").is_file()
    # the summary names the new task's runs among the params it reads
    assert "subtraction.models" in (here / "dvc.yaml").read_text()


def test_a_new_task_scored_as_it_trains_runs_through_the_real_stages(tmp_path):
    """The same checklist for a task whose runs are scored as they train (like modular and
    charlm): its one training stage writes each run's record and curve, its report reads them."""
    here = make_clone(tmp_path)
    env = {"PYTHONPATH": str(here)}
    sh(["arithrepro", "compose-params", "-S", "profile=smoke"], here)
    before = set(sh(["dvc", "stage", "list", "--name-only"], here).split())
    add_task(here, "running")
    sh(["arithrepro", "pipeline"], here, **env)
    sh(["arithrepro", "compose-params", "-S", "profile=smoke"], here, **env)

    cell, run = "gpt-sin-0", "gpt-sin-base-0"
    stages = set(sh(["dvc", "stage", "list", "--name-only"], here).split())
    assert stages - before == {f"train-running@{cell}", "render-figures-running"}
    out = sh(["dvc", "repro", "render-figures-running"], here, **env)
    assert ran_stages(out) == {"code-deps", f"train-running@{cell}", "render-figures-running"}
    record = json.loads((here / "metrics" / "running" / "runs" / f"{run}.json").read_text())
    assert list(record)[:4] == ["task", "model", "size", "seed"] and list(record)[-1] == "provenance"
    assert record["task"] == "running" and record["steps"] == 24 and 0 <= record["val_acc"] <= 1
    curve = (here / "plots" / "running" / "curves" / f"{run}.csv").read_text().splitlines()
    assert curve[0].split(",")[:3] == ["step", "val_loss", "val_acc"] and len(curve) == 1 + 3
    assert (here / "runs" / "running" / run / "model.pt").is_file()
    table = (here / "metrics" / "running.md").read_text()
    assert table.startswith("### running") and "| gpt-sin" in table and "val_acc" in table
