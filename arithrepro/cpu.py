"""Where torch's CPU kernels run, as the params ask (`cpu` in params.yaml; docs/profiles.md).

Another vector unit (AVX-512, AVX2, none) or thread count rounds differently, and training
amplifies it: the same seed can land far apart. So a stage that trains or scores reads both from
its params, and DVC keys its cell by them: a cell trained with another capability is another
cell, never restored in place of this one from the run cache.

- `capability`: `native` (the best this CPU has; ATEN_CPU_CAPABILITY must then be unset) or a
  level torch can be held to (ATEN_CPU_CAPABILITY): `default` (no vector unit), `avx2`,
  `avx512`; on other CPUs `zvector`, `vsx`, `sve256`. torch reads it at its first kernel call,
  so a process sets it before that; a level above what the CPU has is refused.
- `threads`: `auto` (what the runner gives: `arithrepro repro` shares the cores out, `dvc
  repro` leaves torch its default) or a number of threads.
"""

from __future__ import annotations

import os

from arithrepro.schema import ParamsError, fail, integer

CAPABILITIES = ("native", "default", "avx2", "avx512", "zvector", "vsx", "sve256")
ENV = "ATEN_CPU_CAPABILITY"


def _threads(key, value) -> None:
    if value != "auto":
        if isinstance(value, str):
            fail(key, value, "auto or a number of threads (1 or more)")
        integer(1, 4096)(key, value)


# conf/config.yaml's `cpu` block: the params where a caller has none
DEFAULTS = {"capability": "native", "threads": "auto"}


def schema() -> dict:
    from arithrepro.schema import choice

    return {"capability": choice(*CAPABILITIES), "threads": _threads}


def env_for(settings: dict) -> dict:
    """The environment variables a process started for these settings needs."""
    out = {}
    if settings["capability"] != "native":
        out[ENV] = settings["capability"]
    if settings["threads"] != "auto":
        out["OMP_NUM_THREADS"] = out["MKL_NUM_THREADS"] = str(settings["threads"])
    return out


def apply(settings: dict) -> None:
    """Hold this process's torch to `settings` (before its first kernel call, for the
    capability), or say in one line why it cannot be."""
    wanted = settings["capability"]
    present = os.environ.get(ENV)
    if wanted == "native" and present:
        raise ParamsError(f"cpu.capability = native, but {ENV}={present} is set: set "
                          f"cpu.capability to {present.lower()} instead (a cell's params say "
                          "what it ran with), or unset it")
    if wanted != "native":
        os.environ[ENV] = wanted
    import torch

    actual = capability()
    if wanted != "native" and actual is not None and actual.lower() != wanted:
        raise ParamsError(f"cpu.capability = {wanted}: torch runs {actual} kernels here (a CPU "
                          f"without it, or a process whose torch had already started; a stage "
                          f"run alone sets it itself)")
    if settings["threads"] != "auto":
        torch.set_num_threads(int(settings["threads"]))


def capability() -> str | None:
    """The vector instruction set torch's CPU kernels dispatch to (DEFAULT, AVX2, AVX512, ...)."""
    import torch

    get = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return get() if get else None
