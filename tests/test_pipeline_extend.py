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


def test_a_new_task_runs_through_the_real_stages(tmp_path):
    here = make_clone(tmp_path)
    env = {"PYTHONPATH": str(here)}   # the clone's package, which holds the new task
    sh(["arithrepro", "compose-params", "profile=smoke"], here)
    before = set(sh(["dvc", "stage", "list", "--name-only"], here).split())
    # 1. the task's module
    shutil.copy(EXTEND / "subtraction.py", here / "arithrepro" / "tasks" / "subtraction.py")
    # 2. its line in the task registry
    registry = here / "arithrepro" / "tasks" / "registry.py"
    text = registry.read_text()
    assert "looped, modular\n" in text and '    "charlm": charlm.TASK,' in text
    registry.write_text(text.replace("looped, modular\n", "looped, modular, subtraction\n")
                        .replace('    "charlm": charlm.TASK,',
                                 '    "charlm": charlm.TASK,\n    "subtraction": subtraction.TASK,'))
    # 3. its block in conf/config.yaml (no profile changes it)
    with open(here / "conf" / "config.yaml", "a") as f:
        f.write((EXTEND / "subtraction.yaml").read_text())
    # the generated files: dvc.yaml from the registries, params.yaml from conf/
    sh(["arithrepro", "pipeline"], here, **env)
    sh(["arithrepro", "compose-params", "profile=smoke"], here, **env)

    stages = set(sh(["dvc", "stage", "list", "--name-only"], here).split())
    cell = "standard-notebook-0"
    # and the benchmark's cells on it: the token models through the pairs adapter (the smoke
    # profile's one seed)
    bench = {f"{step}-bench-subtraction-{m}@0" for step in ("train", "evaluate")
             for m in ("gpt", "lstm", "retran", "abacus")}
    assert stages - before == {"generate-subtraction", f"train-subtraction@{cell}",
                               f"evaluate-subtraction@{cell}", "report-subtraction", *bench}
    out = sh(["dvc", "repro", "report-subtraction"], here, **env)
    assert ran_stages(out) == {"code-deps", "generate-subtraction", f"train-subtraction@{cell}",
                               f"evaluate-subtraction@{cell}", "report-subtraction"}
    record = json.loads((here / "metrics" / "subtraction" / "runs" / f"{cell}.json").read_text())
    assert {"task", "params", "id_acc", "ood_acc", "train_seconds", "provenance"} <= record.keys()
    assert record["task"] == "subtraction" and 0 <= record["id_acc"] <= 1
    table = (here / "metrics" / "subtraction.md").read_text()
    assert table.startswith("### subtraction") and "| standard" in table and "id_acc" in table
    assert (here / "runs" / "subtraction" / cell / "live" / "metrics.json").is_file()
    # the summary names the new task's runs among the params it reads
    assert "subtraction.models" in (here / "dvc.yaml").read_text()
