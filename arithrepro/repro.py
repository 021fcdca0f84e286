"""`dvc repro` with stages side by side. DVC runs one stage at a time; here the pipeline's
stages run as separate `dvc repro --single-item` processes, several at once where the graph
allows, each with its share of the cores. Every stage is still run, cached and locked by DVC
(its repository lock is released while a stage's command runs, and each process waits for it
for the bookkeeping), so dvc.lock and the cache end as a plain `dvc repro` leaves them.

Why: on a small CPU the runs here are too small to use every core well. Two runs with one
thread each finish 1.4-1.9x sooner than the same two one after another with two threads
(`python -m benchmarks.bench_ensemble --processes 2`).

With `ensemble`, the pending training cells of one configuration, and of the configurations
that differ from it in rate, decay or data alone (runs.Config.ensemble_key), train as one
Ensemble in one process (`arithrepro train --task T RUN RUN ...`) and are
then recorded with `dvc commit` (outputs, dvc.lock and the run cache, as repro records them):
that is the form that pays on a GPU."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from arithrepro.lockfile import remove_partial_copies, repair_lockfile
from arithrepro.processes import Chain, Worker, dvc_holders
from arithrepro.schedule import Job, clock, order_jobs, run_jobs
from arithrepro.slots import slots, thread_env

LOGS = Path("logs") / "repro"


def reproduce(jobs_wanted: int | None, ensemble: bool, targets: tuple[str, ...] = (),
              echo=print, workers_in_process: bool = True, cpu: dict | None = None,
              dry: bool = False, pull: bool = False, projected=None, check=None,
              gpus: list[str] | None = None, per_gpu: int = 1) -> int:
    """Plan from DVC's graph and status, run, and return the exit status. `targets`: those
    stages and what they depend on (as `dvc repro TARGET`); none: the whole pipeline. dry: say
    what would run, in order, and run nothing. pull: each stage restored from the DVC remote
    where it holds the stage's outputs (or its run cache does), run where not. projected:
    {stage: its runs.Run} of the training stages to run -> {stage: projected seconds},
    for the dry run's times; check(those stages, the jobs at once) before anything runs, to
    refuse a plan (it raises), returning the projected seconds it found, for the time left.
    gpus: the GPUs the stages may use (their CUDA ids): each job slot sees one of them only,
    `per_gpu` slots to a GPU unless `jobs_wanted` sets the slots (then dealt round the GPUs).
    The training cells as batch jobs instead: arithrepro/cluster.py."""
    from dvc.repo import Repo

    with holding(Path(Repo.find_root()), echo):
        return _reproduce(jobs_wanted, ensemble, targets, echo, workers_in_process, cpu, dry,
                          pull, projected, check, gpus, per_gpu)


class WorkspaceBusy(ValueError):
    """Another orchestrator is running stages in this workspace."""


@contextmanager
def holding(root: Path, echo=print):
    """One `arithrepro repro` at a time in a workspace, and none beside a DVC command that is
    running stages there. DVC's own lock cannot say it: it is let go while a stage's command
    runs, so that the stages here can run side by side. A plain `dvc repro` started while this
    runs is refused by DVC at the first stage held here (docs/faults.md)."""
    import fcntl

    path = root / ".dvc" / "tmp" / "repro.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise WorkspaceBusy(f"another `arithrepro repro` (pid {f.read().strip() or '?'}) is "
                                f"running in {root}; wait for it to end or stop it") from None
        for pid, cmd in dvc_holders(root, echo):
            raise WorkspaceBusy(f"`{cmd}` (pid {pid}) is running stages in {root}; wait for it "
                                "to end or stop it")
        repair_lockfile(root, echo)
        f.truncate(0)
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield   # the lock goes with the file, also when this process is killed


def _graph(repo, targets: tuple[str, ...]):
    """DVC's graph of `targets` and what they depend on (all stages when none); edges: stage ->
    a stage it depends on."""
    import networkx as nx

    graph = repo.index.graph
    if not targets:
        return graph
    by_name = {s.addressing: s for s in graph}
    # a matrix stage's name stands for all its cells, as `dvc repro` takes it
    named = {t: [s for a, s in by_name.items() if a == t or a.startswith(f"{t}@")]
             for t in targets}
    unknown = [t for t, found in named.items() if not found]
    if unknown:
        raise LookupError(f"stage {unknown[0]}: not in dvc.yaml (`dvc stage list` names "
                          "them; a matrix cell as train-expr@gpt-small-0)")
    wanted = set()
    for found in named.values():
        for stage in found:
            wanted |= {stage, *nx.descendants(graph, stage)}
    return graph.subgraph(wanted)


def _pull_unchanged(repo, graph, targets, status: dict, echo) -> bool:
    """--pull where no pending stage changed its command or params (a clone of a pushed run):
    the outputs dvc.lock names, pulled in one `dvc pull` of the targets and what they depend on;
    returns whether it pulled. DVC's per-stage `repro --pull` reads dvc.yaml and dvc.lock again
    for each stage (docs/benchmarks.md). Where a stage did change, nothing is pulled here: each
    stage's own `--pull` then decides, as `dvc repro --pull` does, and a stale output is never
    fetched. What the remote lacks stays pending, for the run cache or the stage's command."""
    from dvc.exceptions import DvcException

    pending = [s.addressing for s in graph if s.cmd and s.addressing in status]
    if not pending or any(_redefined(status[name]) for name in pending):
        return False
    whose = "stages" if len(pending) > 1 else "stage"
    echo(f"pulling the DVC remote's outputs of {len(pending)} {whose}")
    try:
        repo.pull(list(targets) or None, with_deps=bool(targets), allow_missing=True)
    except DvcException as err:   # what did not come stays pending: each stage's own --pull
        echo(f"  not all came: {str(err).splitlines()[0]}")
    return True


def _redefined(changes: list) -> bool:
    """A stage's `dvc status` entry says its command or params changed, or dvc.lock lacks a
    dependency of it ("new": the stage not run at this definition), not only that files differ."""
    return any(isinstance(c, str) or any(isinstance(v, dict) or v == "new"   # params: {key: how}
                                         for v in c.get("changed deps", {}).values())
               for c in changes)


def plan(targets: tuple[str, ...] = (), echo=None, pull: bool = False):
    """DVC's stages for `targets` (all when none), upstream first: (names, each one's upstream
    stages, the stages DVC reports changed, each one's command). echo: to run, not only to look:
    first remove the partial copies a killed DVC process left beside the outputs (which DVC
    would count as changes to a folder output), then with `pull` restore in one pull what only
    lacks its outputs, saying so there."""
    from dvc.repo import Repo

    with Repo() as repo:
        root = Path(repo.root_dir)
        if echo:
            remove_partial_copies(root, (o.fs_path for o in repo.index.outs), echo)
        graph = _graph(repo, targets)
        stages = [s for s in _upstream_first(graph, repo.index.stages) if s.cmd]
        names = [s.addressing for s in stages]
        upstream = {s.addressing: {d.addressing for d in graph.successors(s) if d.cmd}
                    for s in stages}
        status = repo.status()
        if echo and pull and _pull_unchanged(repo, graph, targets, status, echo):
            status = repo.status()
        pending = set(status)
        cells = training_cells(root, names)
    return names, upstream, pending, cells


def training_cells(root: Path, names: list[str]) -> dict:
    """{stage: runs.Run} of the training cells among `names` (the benchmark's included), from the
    workspace's params (the ones DVC's matrices were filled from); none in a DVC project without
    params.yaml (this scheduler runs any project's stages)."""
    from arithrepro import bench, config
    from arithrepro.tasks.registry import TASKS

    if not (root / "params.yaml").is_file():
        return {}
    params = config.load(root / "params.yaml", record=False)
    known = {run.cell: run for task in TASKS.values()
             for config in bench.trained(task, params) for run in config.runs}
    return {s: known[s] for s in names if s in known}


def _reproduce(jobs_wanted, ensemble, targets, echo, workers_in_process, cpu, dry=False,
               pull=False, projected=None, check=None, gpus=None, per_gpu=1) -> int:
    names, upstream, pending, cells = plan(targets, None if dry else echo, pull)
    cores = sorted(os.sched_getaffinity(0))
    workers, threads, on_gpu = slots(cpu, jobs_wanted, gpus, per_gpu)
    jobs = order_jobs(names, upstream, pending, cells, pull, ensemble)
    if not jobs:
        echo("Data and pipelines are up to date.")
        return 0
    echo(f"{len(jobs)} of {len(names)} stages to run, {min(workers, len(jobs))} at a time with "
         f"{threads} thread{'s' if threads > 1 else ''} each"
         + (f", each on one GPU of {', '.join(gpus)} ({len(on_gpu) // len(gpus)}"
            f"{'+' if len(on_gpu) % len(gpus) else ''} per GPU)" if on_gpu else ""))
    training = {s: cells[s] for job in jobs for s in job.stages if s in cells}
    if dry:
        seconds = projected(training) if projected and training else {}
        for job in jobs:
            mine = [seconds[s] for s in job.stages if s in seconds]
            echo(f"  would run {job.name}" + (f"  (~{clock(sum(mine))})" if mine else ""))
        if seconds:
            total = sum(seconds.values())
            echo(f"training projected on this machine: {clock(total)} one run at a time, "
                 f"about {clock(total / min(workers, len(seconds)))} with {workers} at once "
                 "(a few steps of each run shape timed, as `arithrepro estimate` does; data, "
                 "evaluation and DVC not counted)")
        echo("(dry run: nothing ran)")
        return 0
    expected = {}
    if check and training:
        expected = check(training, min(workers, len(training))) or {}
    env = {**os.environ, **thread_env(cpu, threads)}
    if workers > 1:
        LOGS.mkdir(parents=True, exist_ok=True)

    pool: dict[int, Worker] = {}

    def start(job: Job, slot: int):
        """Each slot on cores of its own (torch sizes its pool to them), when they go round."""
        log = _log(job.stages[0]) if workers > 1 else None
        mine = cores[slot * threads:(slot + 1) * threads]
        mine = mine if 1 < workers and workers * threads <= len(cores) else None
        # a slot's stages see its GPU only, as device 0 (a worker keeps its slot's GPU)
        own = {**env, "CUDA_VISIBLE_DEVICES": on_gpu[slot]} if on_gpu else env
        if not workers_in_process:
            return Chain(job, own, log, mine)
        if slot not in pool or not pool[slot].alive():
            pool[slot] = Worker(own, mine)
        return pool[slot].submit(job, log)

    try:
        failed = run_jobs(jobs, workers, start, echo, expected)
    finally:
        for worker in pool.values():
            worker.close()
    if failed:
        if workers > 1:
            for name in failed:
                echo(f"  log: {_log(name.split(' ')[0])}")
        return 1
    return 0


def _log(stage: str) -> Path:
    """Where a stage's output goes when several run at once."""
    return LOGS / f"{stage.replace('@', '-')}.log"


def _upstream_first(graph, listed):
    """The stages, each after those it depends on, otherwise in dvc.yaml's order."""
    import networkx as nx

    position = {s.addressing: i for i, s in enumerate(listed)}
    return nx.lexicographical_topological_sort(
        graph.reverse(copy=False), key=lambda s: f"{position.get(s.addressing, 0):08d}")
