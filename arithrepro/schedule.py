"""The jobs of a run of the pipeline's stages and the order they may start in: a stage, or a
configuration's pending training cells trained as one ensemble (`arithrepro train --task T RUN
RUN ...`, then recorded with `dvc commit`), each after the jobs it waits for, so many at once
(arithrepro/repro.py runs them)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Job:
    """One process to run: a stage, or pending training cells trained as one ensemble (a
    configuration's seeds, and those of the configurations it trains with)."""

    stages: list[str]
    argv: list[list[str]]  # commands run one after another
    upstream: set = field(default_factory=set)
    runs: tuple = ()       # its training cells' runs.Run, in its stages' order (none: no cell)

    @property
    def name(self) -> str:
        more = len(self.stages) - 1
        return self.stages[0] + (f" (+{more} as one ensemble)" if more else "")


def order_jobs(stages: list[str], upstream: dict[str, set[str]], pending: set[str],
               cells: dict | None = None, pull: bool = False, ensemble: bool = True) -> list[Job]:
    """The jobs for `stages` (in DVC's order, upstream first) given each stage's upstream
    stages and the stages DVC reports changed; `cells`, the training cells' runs.Run: with
    `ensemble`, the pending seeds of a configuration, and of the configurations it trains with
    (runs.Config.ensemble_key), train as one ensemble. A stage not reported
    changed still runs when something upstream of it runs (DVC then decides: its inputs may be
    new); one whose whole upstream stays untouched is skipped here, as DVC would skip it. Jobs
    come back in the order they may start, each with the jobs it waits for (by the first
    stage's name). With `pull`, each stage first looks for its outputs in the DVC remote
    (`dvc repro --pull`): a stage the remote or its run cache holds is restored, not run."""
    cells = cells or {}
    runs: set[str] = set()
    for s in stages:
        if s in pending or upstream[s] & runs:
            runs.add(s)
    chosen = [s for s in stages if s in runs]
    key = {s: _config_of(cells[s]) for s in chosen if s in cells} if ensemble else {}
    groups: dict[tuple, list[str]] = {}
    for s in chosen:
        if key.get(s):
            groups.setdefault(key[s], []).append(s)
    jobs, job_of = [], {}
    for s in chosen:
        members = groups[key[s]] if key.get(s) else [s]
        if s != members[0]:
            continue
        job_runs = tuple(cells[m] for m in members if m in cells)
        job = Job(members, commands(members, job_runs, pull), runs=job_runs)
        for m in members:
            job_of[m] = job
        jobs.append(job)
    for job in jobs:
        for m in job.stages:
            job.upstream |= {job_of[u].stages[0] for u in upstream[m] if u in job_of}
        job.upstream.discard(job.stages[0])
    # the longest-running kind first, so the last to finish is short
    return sorted(jobs, key=lambda j: not j.stages[0].startswith("train-"))


def _config_of(run) -> str:
    """What a training cell's ensemble is keyed on: its configuration, but what copies of one
    ensemble may differ in (runs.Config.ensemble_key: the seed, and rate, decay or data that keep
    the shapes)."""
    return run.config.ensemble_key


def commands(stages: list[str], runs: tuple = (), pull: bool = False) -> list[list[str]]:
    """A stage through DVC; a configuration's cells (`runs`, more than one) trained as one
    ensemble, then recorded."""
    if len(stages) == 1:
        return [["dvc", "--wait-for-lock", "repro", "--single-item", *(["--pull"] if pull else []),
                 stages[0]]]
    return [["arithrepro", "train", "--task", runs[0].task, *(["--bench"] if runs[0].home else []),
             *(r.name for r in runs)],
            ["dvc", "--wait-for-lock", "commit", "--force", *stages]]


def run_jobs(jobs: list[Job], workers: int, start, echo=print,
             expected: dict[str, float] | None = None) -> list[str]:
    """Run `jobs` `workers` at a time, each once the jobs it waits for have finished.
    `start(job, slot)` begins one in worker slot `slot` (0 .. workers - 1, each slot used by
    one job at a time) and returns an object with poll() -> None while it runs, else the exit
    status. After a failure nothing new starts; the running ones finish. Returns the names of
    the jobs that failed. `expected`: a stage's projected seconds (the training stages'), for
    the time left each finished job's line gives."""
    waiting, running, done, failed = list(jobs), {}, set(), []
    free = list(range(workers))
    t0 = time.perf_counter()
    total = len(jobs)
    expected = expected or {}
    projected = {j.stages[0]: sum(expected[s] for s in j.stages if s in expected) for j in jobs
                 if any(s in expected for s in j.stages)}
    others: list[float] = []   # the finished jobs' seconds, those without a projection
    while waiting or running:
        if not failed:
            for job in [j for j in waiting if j.upstream <= done]:
                if not free:
                    break
                waiting.remove(job)
                slot = free.pop(0)
                running[job.stages[0]] = (job, start(job, slot), time.perf_counter(), slot)
                echo(f"[{len(done) + len(running)}/{total}] start {job.name}")
        elif not running:
            break
        time.sleep(0.2)
        for key, (job, proc, began, slot) in list(running.items()):
            code = proc.poll()
            if code is None:
                continue
            del running[key]
            free.append(slot)
            took = time.perf_counter() - began
            if code == 0:
                done.add(key)
                if key in projected:
                    del projected[key]
                else:
                    others.append(took)
                pace = sum(others) / len(others) if others else 0.0
                left = sum(projected.values()) + pace * (total - len(done) - len(projected))
                echo(f"      done  {job.name} in {clock(took)}  "
                     f"{progress(len(done), total, time.perf_counter() - t0, left, workers)}")
            else:
                failed.append(job.name)
                echo(f"      FAILED {job.name} (exit {code}) after {clock(took)}")
    if not failed:
        echo(f"{total} jobs in {clock(time.perf_counter() - t0)}")
    return failed


def progress(done: int, total: int, elapsed: float, left: float, workers: int) -> str:
    """E.g. '(12/40, 3m10s so far, about 7m left)': `left`, the seconds of work still to do
    (each training stage's projection, the other stages at the pace of those that finished),
    shared by `workers` at once."""
    if done >= total:
        return f"({done}/{total}, {clock(elapsed)})"
    left /= max(1, min(workers, total - done))
    return f"({done}/{total}, {clock(elapsed)} so far, about {clock(left)} left)"


def clock(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def ensemble_default(params: dict, device: str, pull: bool) -> bool:
    """A configuration's pending seeds as one ensemble where the stages train on a GPU (2-4x,
    docs/benchmarks.md), but not with --pull (each seed is restored on its own) nor where a task
    trains in fp16 (an ensemble cannot: arithrepro/train/modes.py); auto precision is fp16 on a
    GPU without bf16 only."""
    import torch

    if pull or device == "cpu" or params["precision"] == "fp16":
        return False
    return not (params["precision"] == "auto" and torch.cuda.is_available()
                and not torch.cuda.is_bf16_supported())
