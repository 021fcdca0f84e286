"""code-deps: the code each stage runs, one file per stage family, code-deps/<family>.txt (a
sha256 and a path per line). Every other stage depends on its family's file instead of a list
of source files, so dvc.yaml stays a table of contents and dvc.lock stays small, and a stage
re-runs exactly when code it runs changed.

The code a stage runs is the import closure of its command's module (imports inside functions
included), with two narrowings: a registry's rows count only for the stage's own task, the
models it builds and its figures (editing tasks/charlm.py does not retrain an expr cell, nor the
abacus model the GPT, and an expr figure redraws no other task's), and the registry tables are
left out (registering a model or a task retrains nothing; after changing an existing row, force
its stages: `dvc repro -f -s <stage>`). The modules dvc.yaml is made from (DECLARATIONS) are not
followed: changing them changes dvc.yaml itself.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import click

from arithrepro.stages.common import done, friendly_errors

OUT = Path("code-deps")
# tables whose rows are followed only for the stage's own task and models, then left out
REGISTRIES = ("arithrepro.models.registry", "arithrepro.tasks.registry", "arithrepro.report.figures")
# what dvc.yaml is made of: a change there changes dvc.yaml, which DVC compares itself
DECLARATIONS = ("arithrepro.pipeline", "arithrepro.dvcfile")
# how tasks and models meet: code of the stages that build a model (the others only check, with
# it, that the params pair models with tasks that they can meet)
FORMS = "arithrepro.models.forms"
# commands that build no model (the registry's model rows do not count for them)
BUILDS_NO_MODEL = ("generate-datasets", "charlm-corpus", "aggregate-tables", "render-figures", "llm")


def families() -> dict[str, tuple[str, str | None, tuple]]:
    """{stage family (as dvc.yaml names it): (command, task whose code it runs, the models it
    builds where not the task's own)}."""
    from arithrepro.pipeline import families

    return families()


def family_of(stage: str) -> str:
    """The family of a stage as DVC addresses it (train-expr@gpt-small-0 -> train-expr,
    train-modular-data@lstm-std-0.3-0 -> train-modular)."""
    from arithrepro.pipeline import family_of

    return family_of(stage)


def code_files(root: Path, command: str, task: str | None, edges: dict | None = None,
               models: tuple = ()) -> list[str]:
    """The source files (relative to root) the command runs for `task` (building `models`,
    else the task's own), package __init__s left out (they import nothing:
    tests/test_dvc_yaml.py). `edges` is root's import graph, when the caller has read it
    already (reading it parses every source file)."""
    from arithrepro.cli import COMMANDS
    from arithrepro.imports import closure, graph, project_modules
    from arithrepro.models.registry import MODELS
    from arithrepro.report.figures import FIGURES
    from arithrepro.tasks.registry import TASKS, models_of

    models = ([] if command in BUILDS_NO_MODEL or task is None
              else list(models) or models_of(TASKS[task]))
    own_tasks = {"arithrepro.tasks.base"} | ({f"arithrepro.tasks.{task}"} if task else set())
    builders = {MODELS[m].build.__module__ for m in models}
    figures = {FIGURES[task].render.__module__} if task in FIGURES else set()

    def follow(module: str, target: str) -> bool:
        if target in DECLARATIONS:
            return False
        if target == FORMS:   # builds adapted models; elsewhere it only checks params
            return bool(models)
        if module == "arithrepro.tasks.registry" and target.startswith("arithrepro.tasks."):
            return target in own_tasks
        if module == "arithrepro.models.registry" and target.startswith("arithrepro.models."):
            return target in builders
        if module == "arithrepro.report.figures" and target.startswith("arithrepro.report."):
            return target in figures
        return True

    root = Path(root)
    files = project_modules(root)
    # the tables are followed to their narrowed rows, then left out themselves
    entry = f"arithrepro.stages.{COMMANDS[command][0]}"
    reached = closure(edges or graph(root), entry, follow) - set(REGISTRIES)
    return sorted(str(files[m].relative_to(root)) for m in reached
                  if files[m].name != "__init__.py")


def listing(root: Path, paths: list[str]) -> str:
    """`<sha256>  <path>` per file: changes when a file's content or the set of files does."""
    return "".join(f"{hashlib.sha256((Path(root) / p).read_bytes()).hexdigest()}  {p}\n"
                   for p in paths)


@click.command("code-deps")
@friendly_errors
def code_deps() -> None:
    """Write code-deps/<family>.txt, the code each stage family runs (what DVC compares).

    Reads the sources under arithrepro/ and stages/ (not params). Writes code-deps/.
    """
    import shutil

    from arithrepro.imports import graph
    from arithrepro.io import write_text

    shutil.rmtree(OUT, ignore_errors=True)  # a family dropped from the pipeline leaves nothing
    table = families()
    edges = graph(Path("."))
    for family, (command, task, models) in table.items():
        write_text(OUT / f"{family}.txt",
                   listing(Path("."), code_files(Path("."), command, task, edges, models)))
    done(f"code-deps: {len(table)} stage families -> {OUT}/")
