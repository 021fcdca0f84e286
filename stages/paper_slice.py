"""paper-slice (not a stage): the paper profile's modular and looped runs, made on a GPU and
carried to every other results page (arithrepro/slices.py)."""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.stages.common import TaskName, done, friendly_errors


@click.command("paper-slice")
@click.option("-S", "--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="A param changed, as `dvc exp run -S` (repeatable). Default: "
                   "modular.seeds=[0,42,100,101,102], the source's two seeds beside three that "
                   "chose nothing.")
@click.option("--task", "tasks", multiple=True, type=TaskName(check=True),
              help="Only these tasks (repeatable). Default: modular and looped.")
@click.option("--profile", default="paper", show_default=True,
              help="The profile whose runs the slice makes (another one tries it at its size).")
@click.option("--yes", is_flag=True, help="Start whatever the projection says (repro --yes).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the scratch copy goes (default: the system's temporary folder).")
@click.option("--keep", is_flag=True, help="Keep the scratch copy (it is kept anyway on failure).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Training jobs at once (repro -j; default: repro's, one per GPU): several "
                   "small runs share a GPU that one of them leaves mostly idle.")
@friendly_errors
def paper_slice(overrides: tuple[str, ...], tasks: tuple[str, ...], profile: str, yes: bool,
                workdir: Path | None, keep: bool, jobs: int | None) -> None:
    """Train the paper profile's runs of modular's seven studies and looped's grid in a scratch
    copy of this workspace that shares its DVC cache (`arithrepro repro`: on a GPU, each
    configuration's seeds as one ensemble, CUDA graphs where they win), judge the claims the
    paper profile tests on them, and write docs/runsets/paper-slice.json: per task, the runs'
    commit, tree, GPU and torch, their seeds and the verdicts. Every other profile's results
    page reads it as the paper profile's run set. Writes nothing else here.
    """
    from arithrepro import config, slices

    known = config.profiles("conf")
    if profile not in known:
        raise config.ParamsError(f"--profile {profile}: not in conf/profile/; allowed: "
                                 f"{', '.join(known)}")
    out = Path("docs/runsets/paper-slice.json")
    chosen = list(tasks) or list(slices.DEFAULT_TASKS)
    repro_args = [*(["--yes"] if yes else []), *(["-j", str(jobs)] if jobs else [])]
    slices.run(profile, list(overrides) or list(slices.DEFAULT_SET), chosen, Path.cwd(), out,
               repro_args, workdir, keep, echo=lambda line: click.echo(line, err=True))
    done(f"paper-slice: {out} <- the {profile} profile's runs of {', '.join(chosen)}")
