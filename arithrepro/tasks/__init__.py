"""Task registry: one line per task. A task knows its params, its data, its batches and its
scoring (see expr.py for the interface); the pipeline around it is shared."""

from __future__ import annotations

from arithrepro.tasks import expr

TASKS = {
    "expr": expr.TASK,
}
