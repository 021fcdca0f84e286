"""Each task's findings, and the params keys (under the task's own block) their checks read
besides the records: the results stage declares them in dvc.yaml. A task without findings (a
new one, say) is simply absent: its claims can still be tested by run metrics."""

from __future__ import annotations

from arithrepro.findings import abacus, charlm, expr, looped, modular
from arithrepro.findings.base import Finding

FINDINGS: dict[str, tuple[Finding, ...]] = {
    "expr": expr.FINDINGS,
    "abacus": abacus.FINDINGS,
    "looped": looped.FINDINGS,
    "modular": modular.FINDINGS,
    "charlm": charlm.FINDINGS,
}

READS: dict[str, tuple[str, ...]] = {
    "expr": ("data.min_in", "data.max_in"),
    "looped": ("data.train_digits", "data.eval_digits"),
    "charlm": ("architectures", "schedule"),
}

# the files checks read besides the records (the results stage depends on them): charlm's
# printed training losses, in each run's dvclive series, and its step timings; where modular's
# GPTs attend on the source's samples
FILES: tuple[str, ...] = ("runs/charlm", "metrics/charlm/steps.csv", "plots/modular/attention")

# the registry models a check builds itself (charlm's parameter counts at the source's
# vocabulary): their code is the results stage's code too
BUILDS: tuple[str, ...] = ("gru", "nanogpt")


def _check() -> None:
    from arithrepro.tasks.registry import TASKS

    if not set(FINDINGS) <= set(TASKS) or not set(READS) <= set(TASKS):
        raise TypeError(f"findings registry: tasks {sorted(FINDINGS)}, reads {sorted(READS)}; "
                        f"the task registry has {sorted(TASKS)}")
    for task, found in FINDINGS.items():
        strays = [f.id for f in found if not f.id.startswith(f"{task}.")]
        if strays:
            raise TypeError(f"findings registry: {task} lists {', '.join(strays)}")


_check()
