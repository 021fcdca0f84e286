"""How many stages run at once on this machine, with how many torch threads each, and the GPU each
slot sees."""

from __future__ import annotations

import os


def gpu_slots(gpus: list[str], per_gpu: int, slots: int | None = None) -> list[str]:
    """The GPU each job slot sees: `per_gpu` slots to each GPU, or `slots` dealt round them."""
    if not gpus:
        return []
    return [gpus[i % len(gpus)] for i in range(slots or len(gpus) * per_gpu)]


def slots(cpu: dict | None, jobs_wanted: int | None, gpus=None, per_gpu: int = 1):
    """(the jobs at once, torch threads each, the GPU of each slot) on this machine's cores."""
    from arithrepro.cpu import DEFAULTS

    cores = sorted(os.sched_getaffinity(0))
    cpu = cpu or DEFAULTS
    fixed = cpu["threads"] if cpu["threads"] != "auto" else None   # the params' thread count
    on_gpu = gpu_slots(gpus or [], per_gpu, jobs_wanted)
    workers = len(on_gpu) or jobs_wanted or (max(1, len(cores) // fixed) if fixed else len(cores))
    return workers, fixed or max(1, len(cores) // workers), on_gpu


def thread_env(cpu: dict | None, threads: int) -> dict:
    """The environment a stage's torch reads its threads and CPU kernels from."""
    from arithrepro.cpu import DEFAULTS, env_for

    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            **env_for(cpu or DEFAULTS)}
