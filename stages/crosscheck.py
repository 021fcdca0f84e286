"""crosscheck (not a stage): the findings again under another CPU capability and thread count
(arithrepro/crosscheck.py)."""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.cpu import CAPABILITIES
from arithrepro.stages.common import TaskName, done, friendly_errors, params_option


@click.command("crosscheck")
@params_option
@click.option("--capability", type=click.Choice(CAPABILITIES), default="default", show_default=True,
              help="The vector unit torch's kernels are held to (ATEN_CPU_CAPABILITY); native: "
                   "the best this CPU has.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Threads per run (arithrepro repro runs cores / threads at once).")
@click.option("-S", "--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Also change a param, as `dvc exp run -S` does (repeatable): the params are "
                   "then composed from conf/ with the workspace's profile and these.")
@click.option("--task", "tasks", multiple=True, type=TaskName(),
              help="Only these tasks (repeatable). Default: every task with findings.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the scratch copy goes (default: the system's temporary folder).")
@click.option("--keep", is_flag=True, help="Keep the scratch copy (it is kept anyway on failure).")
@click.option("--page-only", is_flag=True,
              help="Run nothing: rewrite docs/crosscheck.md from docs/crosscheck/*.json and the "
                   "workspace's records.")
@friendly_errors
def crosscheck(params_path: str, capability: str, threads: int, overrides: tuple[str, ...],
               tasks: tuple[str, ...], workdir: Path | None, keep: bool, page_only: bool) -> None:
    """Train and score every cell the chosen tasks' findings read, with params cpu.capability
    and cpu.threads set, in a scratch copy of this workspace that shares its DVC cache; check
    the findings on those runs and write them beside the workspace's own: docs/crosscheck.md
    and docs/crosscheck/<capability>-t<threads>[-<hash of the overrides>].json. With --set, a
    recipe is checked the same way (its overrides are listed on the page). The workspace's runs must exist first
    (`make repro`): they are the page's first column.

    Reads params.yaml (all of it: the scratch copy runs it) and the workspace's run records.
    """
    from arithrepro import config
    from arithrepro import crosscheck as check
    from arithrepro.findings.registry import FINDINGS
    from arithrepro.tasks.registry import TASKS

    params = config.load(params_path)
    for task in tasks:
        config.known_task(task)
    chosen = list(tasks) or [n for n in TASKS if FINDINGS.get(n)]
    setting = {"capability": capability, "threads": threads, "set": list(overrides)}
    if overrides:   # a bad override: one line now, not after the copy
        config.compose([f"profile={params['profile']}", *overrides], Path("conf"))
    own = check.task_report(params, chosen)   # first: a missing record stops it before any work
    result = None if page_only else check.run(params, setting, chosen, Path.cwd(), workdir, keep)
    written = check.write(check.with_tasks_on_record(own, params), result)
    done(f"crosscheck: {', '.join(chosen)} -> {', '.join(map(str, written))}")
