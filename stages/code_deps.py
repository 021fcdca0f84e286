"""code-deps: the code each stage runs, one file per stage family, code-deps/<family>.txt (a
sha256 and a path per line). Every other stage depends on its family's file instead of a list
of source files, so dvc.yaml stays a table of contents and dvc.lock stays small, and a stage
re-runs exactly when code it runs changed (what counts as a stage's code: arithrepro/codedeps.py;
after changing an existing row of a registry, force its stages: `dvc repro -f -s <stage>`).
"""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.codedeps import code_files, listing
from arithrepro.stages.common import done, friendly_errors

OUT = Path("code-deps")


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
