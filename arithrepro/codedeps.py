"""The code a stage runs: the import closure of its command's module (imports inside functions
included), with two narrowings: a registry's rows count only for the stage's own task, the
models it builds and its figures, and the registry tables are left out (registering a model or a
task retrains nothing). The modules dvc.yaml is made from (DECLARATIONS) are not followed:
changing them changes dvc.yaml itself. `arithrepro code-deps` (stages/code_deps.py) writes it per
stage family; the results page reads it to tell whether runs made at another commit ran this
code (arithrepro/runsets.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# tables whose rows are followed only for the stage's own task and models, then left out
REGISTRIES = ("arithrepro.models.registry", "arithrepro.tasks.registry", "arithrepro.report.figures")
# what dvc.yaml is made of: a change there changes dvc.yaml, which DVC compares itself
DECLARATIONS = ("arithrepro.pipeline", "arithrepro.dvcfile")
# how tasks and models meet: code of the stages that build a model (the others only check, with
# it, that the params pair models with tasks that they can meet)
FORMS = "arithrepro.models.forms"
# commands that build no model (the registry's model rows do not count for them)
BUILDS_NO_MODEL = ("generate-datasets", "charlm-corpus", "aggregate-tables", "render-figures", "llm")


def code_files(root: Path, command: str, task: str | None, edges: dict | None = None,
               models: tuple = ()) -> list[str]:
    """The source files (relative to root) the command runs for `task` (building `models`,
    else the task's own), package __init__s left out (they import nothing:
    tests/test_dvc_yaml.py). `edges` is root's import graph, when the caller has read it
    already (reading it parses every source file)."""
    from arithrepro.cli import COMMANDS
    from arithrepro.imports import closure, graph, project_modules
    from arithrepro.models.registry import MODELS, builder_module
    from arithrepro.report.figures import FIGURES
    from arithrepro.tasks.registry import TASKS, models_of

    models = ([] if command in BUILDS_NO_MODEL else list(models)
              or (models_of(TASKS[task]) if task is not None else []))
    own_tasks = {"arithrepro.tasks.base"} | ({f"arithrepro.tasks.{task}"} if task else set())
    builders = {builder_module(MODELS[m].build) for m in models}
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
    edges = dict(edges or graph(root))
    # the model registry names its builders' modules (imported when a model is built): edges
    # the import statements do not show
    registry = REGISTRIES[0]
    edges[registry] = set(edges.get(registry, ())) | (builders & set(files))
    reached = closure(edges, entry, follow) - set(REGISTRIES)
    return sorted(str(files[m].relative_to(root)) for m in reached
                  if files[m].name != "__init__.py")


def listing(root: Path, paths: list[str]) -> str:
    """`<sha256>  <path>` per file: changes when a file's content or the set of files does."""
    return "".join(f"{hashlib.sha256((Path(root) / p).read_bytes()).hexdigest()}  {p}\n"
                   for p in paths)
