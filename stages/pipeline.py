"""pipeline: write dvc.yaml from the task and model registries (arithrepro/pipeline.py).

Not a stage: run it after adding or changing a task, a study or a figure; tests fail while the
committed dvc.yaml differs from what the registries declare.
"""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.stages.common import done, friendly_errors


@click.command("pipeline")
@click.option("--out", "out_path", default="dvc.yaml", show_default=True,
              type=click.Path(dir_okay=False), help="The pipeline file to write.")
@click.option("--check", is_flag=True, help="Write nothing; fail if the file differs.")
@friendly_errors
def pipeline(out_path: str, check: bool) -> None:
    """Write dvc.yaml: every task's stages, its report, code-deps and the summary."""
    from arithrepro.io import write_text
    from arithrepro.pipeline import as_yaml, stages

    text, path = as_yaml(), Path(out_path)
    count = sum(len(family) for _, family in stages())
    if check:
        if not path.is_file() or path.read_text() != text:
            raise ValueError(f"{path}: differs from what the registries declare; "
                             "run `arithrepro pipeline`")
        done(f"pipeline: {path} is current ({count} stage definitions)")
        return
    write_text(path, text)
    done(f"pipeline: {count} stage definitions -> {path}")
