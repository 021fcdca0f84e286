"""`dvc repro` with stages side by side. DVC runs one stage at a time; here the pipeline's
stages run as separate `dvc repro --single-item` processes, several at once where the graph
allows, each with its share of the cores. Every stage is still run, cached and locked by DVC
(its repository lock is released while a stage's command runs, and each process waits for it
for the bookkeeping), so dvc.lock and the cache end as a plain `dvc repro` leaves them.

Why: on a small CPU the runs here are too small to use every core well. Two runs with one
thread each finish 1.4-1.9x sooner than the same two one after another with two threads
(`python -m benchmarks.bench_ensemble --processes 2`).

With `ensemble`, the pending training cells of one configuration that differ in their seed
alone train as one Ensemble in one process (`arithrepro train --task T RUN RUN ...`) and are
then recorded with `dvc commit` (outputs, dvc.lock and the run cache, as repro records them):
that is the form that pays on a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

LOGS = Path("logs") / "repro"


@dataclass
class Job:
    """One process to run: a stage, or a group of training cells trained as one ensemble."""

    stages: list[str]
    argv: list[list[str]]  # commands run one after another
    upstream: set = field(default_factory=set)

    @property
    def name(self) -> str:
        if len(self.stages) == 1:
            return self.stages[0]
        return f"{self.stages[0]} (+{len(self.stages) - 1} as one ensemble)"


def order_jobs(stages: list[str], upstream: dict[str, set[str]], pending: set[str],
               cells: dict | None = None, pull: bool = False) -> list[Job]:
    """The jobs for `stages` (in DVC's order, upstream first) given each stage's upstream
    stages and the stages DVC reports changed; `cells` (the training cells' runs.Run), to train
    the pending seeds of a configuration as one ensemble. A stage not reported changed still runs when
    something upstream of it runs (DVC then decides: its inputs may be new); one whose whole
    upstream stays untouched is skipped here, as DVC would skip it. Jobs come back in the
    order they may start, each with the jobs it waits for (by the first stage's name). With
    `pull`, each stage first looks for its outputs in the DVC remote (`dvc repro --pull`): a
    stage the remote or its run cache holds is restored, not run."""
    runs: set[str] = set()
    for s in stages:
        if s in pending or upstream[s] & runs:
            runs.add(s)
    chosen = [s for s in stages if s in runs]
    key = {s: _config_of(cells[s]) for s in chosen if s in cells} if cells else {}
    groups: dict[tuple, list[str]] = {}
    for s in chosen:
        if key.get(s):
            groups.setdefault(key[s], []).append(s)
    jobs, job_of = [], {}
    for s in chosen:
        members = groups[key[s]] if key.get(s) else [s]
        if s != members[0]:
            continue
        job = Job(members, _commands(members, cells, pull))
        for m in members:
            job_of[m] = job
        jobs.append(job)
    for job in jobs:
        for m in job.stages:
            job.upstream |= {job_of[u].stages[0] for u in upstream[m] if u in job_of}
        job.upstream.discard(job.stages[0])
    # the longest-running kind first, so the last to finish is short
    return sorted(jobs, key=lambda j: not j.stages[0].startswith("train-"))


def _config_of(run) -> tuple:
    """What a training cell's ensemble is keyed on: its configuration (a benchmark's apart)."""
    return run.task, run.home, run.config.name


def _commands(stages: list[str], cells: dict | None, pull: bool = False) -> list[list[str]]:
    if len(stages) == 1:
        return [["dvc", "--wait-for-lock", "repro", "--single-item", *(["--pull"] if pull else []),
                 stages[0]]]
    runs = [cells[s] for s in stages]
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
                echo(f"      done  {job.name} in {_clock(took)}  "
                     f"{progress(len(done), total, time.perf_counter() - t0, left, workers)}")
            else:
                failed.append(job.name)
                echo(f"      FAILED {job.name} (exit {code}) after {_clock(took)}")
    if not failed:
        echo(f"{total} jobs in {_clock(time.perf_counter() - t0)}")
    return failed


def progress(done: int, total: int, elapsed: float, left: float, workers: int) -> str:
    """E.g. '(12/40, 3m10s so far, about 7m left)': `left`, the seconds of work still to do
    (each training stage's projection, the other stages at the pace of those that finished),
    shared by `workers` at once."""
    if done >= total:
        return f"({done}/{total}, {_clock(elapsed)})"
    left /= max(1, min(workers, total - done))
    return f"({done}/{total}, {_clock(elapsed)} so far, about {_clock(left)} left)"


def _clock(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class _Worker:
    """A stage worker process (arithrepro/stage_worker.py) on cores of its own: Python, DVC and
    torch load once for all the jobs it runs."""

    def __init__(self, env: dict, cores: list[int] | None, cwd: Path | None = None):
        import sys

        read, write = os.pipe()
        pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
        self.proc = subprocess.Popen([sys.executable, "-m", "arithrepro.stage_worker", str(write)],
                                     env=env, stdin=subprocess.PIPE, text=True, pass_fds=(write,),
                                     preexec_fn=pin, cwd=cwd)
        os.close(write)
        os.set_blocking(read, False)
        self.replies, self.buffer = os.fdopen(read, "rb", buffering=0), b""

    def submit(self, job: Job, log: Path | None) -> "_Worker":
        import json

        self.proc.stdin.write(json.dumps({"argv": job.argv, "log": str(log) if log else None}) + "\n")
        self.proc.stdin.flush()
        return self

    def poll(self):
        """The job's exit status once it has ended, else None."""
        import json

        chunk = self.replies.read()
        if chunk:
            self.buffer += chunk
        if b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            return json.loads(line)["code"]
        if self.proc.poll() is not None:  # the worker itself died (killed, out of memory)
            return self.proc.returncode or 1
        return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()
            self.proc.wait()


class _Chain:
    """A job's commands one after another, as one process for run_jobs; output to its log
    (or the terminal when the jobs run one at a time)."""

    def __init__(self, job: Job, env: dict, log: Path | None, cores: list[int] | None):
        self.job, self.env, self.log, self.cores = job, env, log, cores
        self.left = list(job.argv)
        self.out = open(log, "w") if log else None
        self.proc = self._next()

    def _next(self):
        argv = self.left.pop(0)
        if self.out:
            self.out.write("$ " + " ".join(argv) + "\n")
            self.out.flush()
        pin = (lambda: os.sched_setaffinity(0, self.cores)) if self.cores else None
        return subprocess.Popen(argv, env=self.env, stdout=self.out, preexec_fn=pin,
                                stderr=subprocess.STDOUT if self.out else None)

    def poll(self):
        code = self.proc.poll()
        if code == 0 and self.left:
            self.proc = self._next()
            return None
        if code is not None and self.out:
            self.out.close()
        return code


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
        for pid, cmd in _dvc_holders(root, echo):
            raise WorkspaceBusy(f"`{cmd}` (pid {pid}) is running stages in {root}; wait for it "
                                "to end or stop it")
        repair_lockfile(root, echo)
        f.truncate(0)
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield   # the lock goes with the file, also when this process is killed


def _dvc_holders(root: Path, echo=print) -> list[tuple[int, str]]:
    """The live processes DVC's path locks (.dvc/tmp/rwlock) name: commands running stages.
    DVC rewrites that file in place, so a DVC process killed at the wrong moment leaves it empty
    or cut short, and every later DVC command in the workspace stops on it; with no DVC process
    left in the workspace, it is removed here (it names nothing but running processes)."""
    import json

    path = root / ".dvc" / "tmp" / "rwlock"
    try:
        lock = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except ValueError:
        others = _dvc_processes(root)
        if others:
            return others
        path.unlink(missing_ok=True)
        echo(f"removed {path.relative_to(root)}: cut short by a DVC process killed while "
             "writing it, and no DVC process is left in this workspace")
        return []
    infos = [*lock.get("write", {}).values(), *(i for held in lock.get("read", {}).values()
                                                  for i in held)]
    alive = {(int(i["pid"]), _shown(i["cmd"].split(" "))) for i in infos
             if int(i["pid"]) != os.getpid() and _alive(int(i["pid"]))}
    return sorted(alive)


def repair_lockfile(root: Path, echo=print) -> None:
    """DVC rewrites dvc.lock in place, so a DVC process killed while writing it leaves it cut
    short, and every later DVC command in the workspace stops on it. Called with no DVC process
    left in the workspace: the whole entries are kept and the cut one is dropped, so its stage
    runs again (or comes back from the run cache); a file with no whole entry is removed."""
    import re

    import yaml
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA

    from arithrepro.io import write_text

    path = root / "dvc.lock"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return

    def valid(candidate: str) -> bool:
        try:
            COMPILED_LOCKFILE_SCHEMA(yaml.safe_load(candidate))
            return True
        except Exception:   # a YAML error, or DVC's schema refusing it
            return False

    if valid(text):
        return
    starts = [m.start() for m in re.finditer(r"^  \S", text, flags=re.M)]   # a stage's entry
    for kept in range(len(starts) - 1, 0, -1):
        if valid(text[:starts[kept]]):
            write_text(path, text[:starts[kept]])
            echo(f"dvc.lock: cut short by a DVC process killed while writing it; kept its "
                 f"whole entries ({kept}), dropped the cut one (its stage runs again or comes "
                 "back from the run cache)")
            return
    path.unlink()
    echo("dvc.lock: cut short by a DVC process killed while writing it, with no whole entry; "
         "removed (the stages come back from the run cache or run again)")


def _shown(argv: list[str]) -> str:
    """A command line as a message names it: from the program (`dvc`, or the script a Python
    runs), by its name rather than its path."""
    names = [Path(part).name for part in argv[:2]]
    start = names.index("dvc") if "dvc" in names else 0
    return " ".join([Path(argv[start]).name, *argv[start + 1:]])


def _alive(pid: int) -> bool:
    """Running: a killed process stays in the process table (a zombie) until it is reaped."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _dvc_processes(root: Path) -> list[tuple[int, str]]:
    """Live DVC commands whose working directory is the workspace (other than this process)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        cmd = proc.info["cmdline"] or []
        if ("dvc" in [Path(part).name for part in cmd[:2]]   # dvc ..., or python .../dvc ...
                and proc.info["pid"] != os.getpid() and proc.info["cwd"] == str(root)):
            found.append((proc.info["pid"], _shown(cmd)))
    return found


def gpu_slots(gpus: list[str], per_gpu: int, slots: int | None = None) -> list[str]:
    """The GPU each job slot sees: `per_gpu` slots to each GPU, or `slots` dealt round them."""
    if not gpus:
        return []
    return [gpus[i % len(gpus)] for i in range(slots or len(gpus) * per_gpu)]


def plan(targets: tuple[str, ...] = ()):
    """DVC's stages for `targets` (all when none), upstream first: (names, each one's upstream
    stages, the stages DVC reports changed, each one's command)."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo() as repo:
        graph = repo.index.graph  # edges: stage -> a stage it depends on
        if targets:
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
            graph = graph.subgraph(wanted)
        stages = [s for s in _upstream_first(graph, repo.index.stages) if s.cmd]
        names = [s.addressing for s in stages]
        upstream = {s.addressing: {d.addressing for d in graph.successors(s) if d.cmd}
                    for s in stages}
        pending = set(repo.status())
        cells = training_cells(Path(repo.root_dir), names)
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
             for run in [*task.runs(params), *(bench.runs(task, params) if task.grid else [])]}
    return {s: known[s] for s in names if s in known}


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


def _reproduce(jobs_wanted, ensemble, targets, echo, workers_in_process, cpu, dry=False,
               pull=False, projected=None, check=None, gpus=None, per_gpu=1) -> int:
    names, upstream, pending, cells = plan(targets)
    cores = sorted(os.sched_getaffinity(0))
    workers, threads, on_gpu = slots(cpu, jobs_wanted, gpus, per_gpu)
    jobs = order_jobs(names, upstream, pending, cells if ensemble else None, pull)
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
            echo(f"  would run {job.name}" + (f"  (~{_clock(sum(mine))})" if mine else ""))
        if seconds:
            total = sum(seconds.values())
            echo(f"training projected on this machine: {_clock(total)} one run at a time, "
                 f"about {_clock(total / min(workers, len(seconds)))} with {workers} at once "
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

    pool: dict[int, _Worker] = {}

    def start(job: Job, slot: int):
        """Each slot on cores of its own (torch sizes its pool to them), when they go round."""
        log = _log(job.stages[0]) if workers > 1 else None
        mine = cores[slot * threads:(slot + 1) * threads]
        mine = mine if 1 < workers and workers * threads <= len(cores) else None
        # a slot's stages see its GPU only, as device 0 (a worker keeps its slot's GPU)
        own = {**env, "CUDA_VISIBLE_DEVICES": on_gpu[slot]} if on_gpu else env
        if not workers_in_process:
            return _Chain(job, own, log, mine)
        if slot not in pool or not pool[slot].alive():
            pool[slot] = _Worker(own, mine)
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
