"""The run a stage names, found among its task's configurations: above the tasks (it asks them
for their configurations), apart from the runner, so that a stage that only reads a trained run
(evaluate) depends on none of the training code."""

from __future__ import annotations

from arithrepro.runs import Config, Run


def find(task, params: dict, name: str, among: list[Config] | None = None) -> Run:
    """The run of `task` called `name` among the configurations `among` (the benchmark's of
    it), else among the task's own in these params (ParamsError naming the ones there are: the
    name is the caller's input, refused as the params are). Its configuration is built from
    the params, so that what it reads is recorded (params_reads) as the stage's reads."""
    if among is None:
        found = [r for c in task.configs(params, run=name) for r in c.runs if r.name == name]
        if found:
            return found[0]
        from arithrepro.params_reads import unrecorded

        among = task.configs(unrecorded(params))
        what = "a run"
    else:
        found = [r for c in among for r in c.runs if r.name == name]
        if found:
            c = found[0].config
            return Run(task.config(params, *c.key, seeds=c.seeds), found[0].seed)
        what = "a benchmark run"
    names = [r.name for c in among for r in c.runs]
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "") or "none"
    from arithrepro.schema import ParamsError

    raise ParamsError(f"run {name}: not {what} of {task.name} in these params ({shown})")
