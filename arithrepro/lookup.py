"""The run a stage names, found among its task's configurations: above the tasks (it asks them
for their configurations), apart from the runner, so that a stage that only reads a trained run
(evaluate) depends on none of the training code."""

from __future__ import annotations

from arithrepro.runs import Config, Run


def find(task, params: dict, name: str, among: list[Config] | None = None) -> Run:
    """The run of `task` called `name` among the configurations `among` (the benchmark's of
    it), else among the task's own in these params (ParamsError naming the ones there are: the
    name is the caller's input, refused as the params are). Listing them reads nothing of the
    params; the one found is built again from them, so that what it reads is recorded
    (params_reads) as the stage's reads."""
    from arithrepro.params_reads import unrecorded

    listed = task.configs(unrecorded(params)) if among is None else among
    runs = {r.name: r for c in listed for r in c.runs}
    if name not in runs:
        shown = ", ".join(list(runs)[:12]) + (", ..." if len(runs) > 12 else "") or "none"
        what = "a run" if among is None else "a benchmark run"
        from arithrepro.schema import ParamsError

        raise ParamsError(f"run {name}: not {what} of {task.name} in these params ({shown})")
    found = runs[name]
    return Run(task.config(params, *found.config.key, seeds=found.config.seeds), found.seed)
