"""dvc.yaml's code dependencies are exact: each stage depends on the import closure of its
command's module (arithrepro/cli.py names it), no more and no less.

Two rules narrow the closure, and dvc.yaml's header states them: a registry's rows count only
for the stage's own task and the models it builds (so editing tasks/charlm.py does not retrain
an expr cell, and a change to the abacus model does not retrain the GPT), and the two registry
tables themselves are left out (so registering a model or a task retrains nothing).
"""

import shlex
from pathlib import Path

import pytest

from tests.import_graph import graph, project_modules

ROOT = Path(__file__).resolve().parents[1]
REGISTRIES = ("arithrepro.models.registry", "arithrepro.tasks.registry")
BUILDS_NO_MODEL = {"generate-datasets", "charlm-corpus", "aggregate-tables", "render-figures"}
STUDY_TASKS = {"modular-study": "modular", "modular-attention": "modular",
               "charlm-corpus": "charlm", "charlm-train": "charlm", "charlm-sample": "charlm",
               "charlm-compute": "charlm"}


def stages():
    from dvc.repo import Repo

    return list(Repo(str(ROOT)).index.stages)


def command(stage) -> tuple[str, str | None]:
    """(subcommand, task) of a stage's `arithrepro ...` command."""
    args = shlex.split(stage.cmd)
    assert args[0] == "arithrepro", stage.cmd
    task = args[args.index("--task") + 1] if "--task" in args else STUDY_TASKS.get(args[1])
    return args[1], task


def closure(entry: str, tasks: list[str], models: list[str]) -> set[str]:
    from arithrepro.models.registry import MODELS

    edges = graph()
    own = {f"arithrepro.tasks.{t}" for t in tasks} | {"arithrepro.tasks.base"}
    builders = {MODELS[m].build.__module__ for m in models}
    seen, todo = set(), [entry]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for target in edges[module]:
            if module == "arithrepro.tasks.registry" and target.startswith("arithrepro.tasks.") \
                    and target not in own:
                continue
            if module == "arithrepro.models.registry" and target.startswith("arithrepro.models.") \
                    and target not in builders:
                continue
            todo.append(target)
    return seen - set(REGISTRIES)


def expected_code(stage) -> set[str]:
    from arithrepro.cli import COMMANDS
    from arithrepro.tasks.registry import TASKS, models_of

    sub, task = command(stage)
    tasks = [task] if task else []
    models = [] if sub in BUILDS_NO_MODEL else [m for t in tasks for m in models_of(TASKS[t])]
    files = project_modules()
    return {str(files[m].relative_to(ROOT)) for m in
            closure(f"arithrepro.stages.{COMMANDS[sub][0]}", tasks, models)
            if files[m].name != "__init__.py"}


def declared_code(stage) -> set[str]:
    """The stage's deps that are code: files, or every .py under a listed folder."""
    out = set()
    for dep in stage.deps:
        path = Path(str(dep.def_path))
        if path.parts[0] not in ("arithrepro", "stages"):
            continue
        full = ROOT / path
        out |= ({str(p.relative_to(ROOT)) for p in full.rglob("*.py")} if full.is_dir()
                else {str(path)})
    return out


def test_every_stage_depends_on_exactly_the_code_it_runs():
    wrong = {}
    for stage in stages():
        expected, declared = expected_code(stage), declared_code(stage)
        if expected != declared:
            wrong[stage.addressing] = {"missing": sorted(expected - declared),
                                       "not used": sorted(declared - expected)}
    assert wrong == {}


def test_package_inits_import_nothing():
    """They are left out of the closures above, so they must not run code of their own."""
    edges = graph()
    assert {m: sorted(e) for m, e in edges.items()
            if project_modules()[m].name == "__init__.py" and e - {"arithrepro"}} == {}


@pytest.mark.parametrize("rule", ["tasks", "models"])
def test_the_narrowing_rules_matter(rule):
    """Without the narrowing, an expr cell would depend on charlm's task or abacus's model."""
    from arithrepro.models.registry import MODELS
    from arithrepro.tasks.registry import models_of, TASKS

    narrow = closure("arithrepro.stages.train", ["expr"], models_of(TASKS["expr"]))
    assert "arithrepro.tasks.charlm" not in narrow and "arithrepro.models.abacus" not in narrow
    wide = (closure("arithrepro.stages.train", list(TASKS), models_of(TASKS["expr"]))
            if rule == "tasks" else closure("arithrepro.stages.train", ["expr"], list(MODELS)))
    assert ("arithrepro.tasks.charlm" if rule == "tasks" else "arithrepro.models.abacus") in wide


def test_a_stage_missing_a_file_is_caught():
    """The comparison sees a dropped dependency (the train stage without train.py)."""
    stage = next(s for s in stages() if s.addressing.startswith("train-expr@"))
    stage.deps = [d for d in stage.deps if str(d.def_path) != "arithrepro/train.py"]
    assert "arithrepro/train.py" in expected_code(stage) - declared_code(stage)
