"""`arithrepro repro --executor slurm|local`: the pending training cells as jobs of a batch
system, through submitit; everything else runs here.

DVC's lock allows one running stage per workspace, so each job works in a checkout of its
own: a clone of the workspace's commit with the workspace's uncommitted files laid over it
(params.yaml, dvc.lock). It pulls its inputs from the DVC remote, runs its stage with `dvc
repro --single-item --pull` (a cell the remote's run cache already holds is restored, never
trained again), and pushes its outputs and the run cache. The checkout outlives a killed,
preempted or timed-out job, so the job sent again in its place resumes from the run's
checkpoint. Once every cell is in the remote, the workspace collects them with `dvc repro
--pull` and runs the reports.

`local` runs the same jobs as processes of this machine (submitit's local executor): the
path a cluster takes, testable without one."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import submitit

from arithrepro.schedule import Job, clock

# a job that fails this many times in a row is given up (a preemption counts as a failure)
RETRIES = 2
# states after which a job will not run again by itself
ENDED = {"FINISHED", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
         "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "INTERRUPTED", "NO PROCESS AND NO RESULT"}


@dataclass(kw_only=True)
class Assignment(Job):
    """A training job as a cluster job's work, in a checkout of its own: a training cell, or a
    configuration's seeds trained as one ensemble (its argv run there one after another)."""

    pulls: list[str] = field(default_factory=list)  # the stages whose outputs it needs
    seconds: float | None = None  # projected training time

    @property
    def folder(self) -> str:
        return self.stages[0].replace("@", "-")


@dataclass
class Source:
    """What every job checks out: the workspace's commit, and its uncommitted files."""

    repo: str                    # where to clone from (the workspace; on a cluster, a shared path)
    commit: str
    overlay: str                 # a folder holding the workspace's modified and untracked files
    deleted: list[str] = field(default_factory=list)
    config_local: str | None = None   # .dvc/config.local: the remote, the cache's place
    remote: str | None = None


def snapshot(root: Path, into: Path, remote: str | None) -> Source:
    """The workspace as jobs should see it, frozen now: a later edit there changes no job."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True).stdout

    commit = git("rev-parse", "HEAD").strip()
    # staged or not (DVC stages dvc.lock itself), and untracked but not ignored
    listed = git("diff", "-z", "--name-only", "HEAD") + git("ls-files", "-z", "-o",
                                                             "--exclude-standard")
    changed = sorted({f for f in listed.split("\0") if f and (root / f).is_file()})
    deleted = [f for f in git("diff", "-z", "--name-only", "--diff-filter=D", "HEAD").split("\0")
               if f]
    overlay = into / f"overlay-{commit[:12]}-{time.strftime('%Y%m%d-%H%M%S')}"
    for name in changed:
        (overlay / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, overlay / name)
    overlay.mkdir(parents=True, exist_ok=True)
    local = root / ".dvc" / "config.local"
    return Source(str(root), commit, str(overlay), deleted,
                  local.read_text() if local.is_file() else None, remote)


class AssignmentFailed(RuntimeError):
    """A command of a job exited non-zero (its output is in the job's log)."""


class AssignmentJob(submitit.helpers.Checkpointable):
    """What a job runs. Checkpointable: on a time limit or a preemption submitit sends the job
    again under its id, and the run resumes from its checkpoint."""

    def __call__(self, assignment: Assignment, source: Source, workdir: str, env: dict) -> dict:
        import fcntl

        checkout = Path(workdir) / "checkouts" / assignment.folder
        checkout.parent.mkdir(parents=True, exist_ok=True)
        # a job sent again while the one it replaces still runs (a node the scheduler lost
        # track of) waits for it rather than sharing its checkout
        with open(checkout.parent / f"{assignment.folder}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            prepare(checkout, source)
            same_code(checkout)
            run_env = {**os.environ, **env, "DVC_NO_ANALYTICS": "1",
                       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
            remote = ["--remote", source.remote] if source.remote else []
            began = time.time()
            if assignment.pulls:
                _run(["dvc", "pull", *remote, *assignment.pulls], checkout, run_env)
            argv = assignment.argv
            stages = assignment.stages
            if len(stages) > 1 and set(stages) <= cached(stages, source.remote, checkout):
                # an ensemble an earlier job of this assignment trained and pushed: restored
                argv = [["dvc", "repro", "--single-item", "--pull", s] for s in assignment.stages]
            out = "".join(_run(a, checkout, run_env) for a in argv)
            _run(["dvc", "push", "--run-cache", *remote, *assignment.stages], checkout, run_env)
        restored = [s for s in assignment.stages if f"Stage '{s}' is cached - skipping run" in out]
        return {"stages": assignment.stages, "restored": restored, "seconds": time.time() - began}


def _run(argv: list[str], cwd: Path, env: dict) -> str:
    """A job's command, its output echoed to the job's log as it comes (a job killed, cancelled
    or preempted mid-run leaves how far it got) and returned."""
    print("$ " + " ".join(argv), flush=True)
    if argv[0] == "dvc":
        argv = [sys.executable, "-m", "dvc", *argv[1:]]
    lines = []
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:   # a progress bar's updates (\r) arrive as lines
            print(line, end="", flush=True)
            lines.append(line)
    out = "".join(lines)
    if proc.returncode:
        last = out.strip().splitlines()[-1:] or [""]
        raise AssignmentFailed(f"`{' '.join(argv)}` exited {proc.returncode}: {last[0][:300]}")
    return out


def prepare(checkout: Path, source: Source) -> None:
    """The job's checkout: cloned once, then kept (with a cut-short run's checkpoint) for the
    jobs sent again in its place."""
    import json

    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    mark = json.dumps([source.commit, source.overlay])
    if (checkout / ".git" / "arithrepro-source").is_file() and\
            (checkout / ".git" / "arithrepro-source").read_text() == mark:
        return
    part = checkout.with_name(checkout.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "--no-checkout", source.repo, str(part)],
                   check=True, capture_output=True, env=env)
    subprocess.run(["git", "checkout", "-q", "--detach", source.commit], cwd=part,
                   check=True, capture_output=True, env=env)
    for name in source.deleted:
        (part / name).unlink(missing_ok=True)
    shutil.copytree(source.overlay, part, dirs_exist_ok=True)
    if source.config_local is not None:
        (part / ".dvc" / "config.local").write_text(source.config_local)
    # an older submission's checkout (or one cut short): its checkpoints come along, each
    # resumed only by the run whose configuration it holds
    for old in checkout.glob("runs/**/checkpoint*.pt") if checkout.is_dir() else ():
        new = part / old.relative_to(checkout)
        new.parent.mkdir(parents=True, exist_ok=True)
        old.rename(new)
    (part / ".git" / "arithrepro-source").write_text(mark)
    shutil.rmtree(checkout, ignore_errors=True)
    part.rename(checkout)


def same_code(checkout: Path) -> None:
    """Jobs run the installed arithrepro; it must be the code the cell's stage names, or the
    run would be recorded under code it did not run."""
    from arithrepro.provenance import code_root

    installed = code_root()
    for folder in ("arithrepro", "stages"):
        for mine in sorted((checkout / folder).rglob("*.py")):
            theirs = installed / mine.relative_to(checkout)
            if not theirs.is_file() or theirs.read_bytes() != mine.read_bytes():
                raise AssignmentFailed(f"the installed arithrepro ({installed}) differs from the "
                                 f"code this job checked out: {mine.relative_to(checkout)} "
                                 "(keep the code unchanged while the jobs run)")


def check(kind: str, options: dict[str, str]) -> None:
    """The --slurm options and the scheduler, before anything runs (and before sinfo is asked
    what the cluster has): ValueError in one line."""
    if "cpus_per_task" in options:
        threads = _value(options["cpus_per_task"])
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"--slurm cpus_per_task={options['cpus_per_task']}: expected a "
                             "whole number >= 1")
    try:
        executor(kind, Path(".dvc/tmp/cluster/jobs"), options, 1, False, 30)
    except RuntimeError as err:   # submitit's: no srun here
        raise ValueError(f"--executor {kind}: {err} (submit from a login node of the "
                         "cluster)") from None


def wants_gpu(executor: str | None, device: str, here: str, partition: str | None) -> bool:
    """Whether each job asks for a GPU. device cuda: always; cpu: never; auto: on SLURM where
    the cluster (its `partition`, else any) has one to give, as a local job where this machine
    does. A CPU cluster asked for a GPU refuses the whole array."""
    if executor is None or device == "cpu":
        return False
    if executor == "local":
        return here != "cpu"
    return device != "auto" or gives_gpus(partition)


def gives_gpus(partition: str | None = None) -> bool:
    """Whether a node of SLURM's `partition` (None: of any) lists a GPU among its generic
    resources (sinfo's %G: `gpu:4`, `gpu:a100:2(S:0-1)`, `(null)`). No sinfo: no cluster, and
    the executor's own check says so."""
    cmd = ["sinfo", "--noheader", "--format=%G", *(["--partition", partition] if partition else [])]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        return False
    if out.returncode:
        why = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        raise ValueError(f"`{' '.join(cmd)}`: {why}")
    return any(item.split(":")[0] == "gpu"
               for line in out.stdout.split() for item in line.split(","))


def refused(err: Exception, family: str, ex) -> ValueError:
    """sbatch's refusal of a family's array, in one line with the options that were asked."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    said = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
    asked = " ".join(f"--{k.replace('_', '-')}={v}" for k, v in sorted(ex.parameters.items())
                     if not isinstance(v, (list, dict)))
    return ValueError(f"sbatch refused the {family} jobs: {said} (asked: {asked})")


def executor(kind: str, folder: Path, options: dict[str, str], threads: int, gpu: bool,
             minutes: float):
    """submitit's executor for `kind`: one CPU task per job with `threads` cores, one GPU on a
    GPU profile, `minutes` of time unless `options` (slurm_* parameters, without the prefix:
    partition, account, qos, timeout_min, array_parallelism, ...) say otherwise."""
    if kind == "local":
        ex = submitit.LocalExecutor(folder=folder, max_num_timeout=RETRIES)
        # never cut short; a GPU job sees the machine's first GPU (submitit's local executor
        # hides every GPU from a job that asks for none)
        ex.update_parameters(timeout_min=max(minutes, 24 * 60), gpus_per_node=int(gpu))
        return ex
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=RETRIES)
    wanted = {"cpus_per_task": threads, "time": math.ceil(minutes), "ntasks_per_node": 1,
              **({"gpus_per_node": 1} if gpu else {})}
    for key, value in options.items():
        key = "time" if key == "timeout_min" else key
        wanted[key] = _value(value)
    if not wanted.get("gpus_per_node"):   # gpus_per_node=0: a CPU job asks for no GPU line
        wanted.pop("gpus_per_node", None)
    try:
        ex.update_parameters(**wanted)
    except ValueError as err:   # submitit names the parameters it does not know
        raise ValueError(f"--slurm: {err}".splitlines()[0]) from None
    return ex


def _value(text: str):
    """A --slurm value as submitit takes it: a number, JSON for a list or a mapping (setup,
    additional_parameters), else the text."""
    import json

    if text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            raise ValueError(f"--slurm: {text}: not valid JSON") from None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def minutes_for(seconds: float | None) -> float:
    """A job's time limit: twice the projection and ten minutes of set-up, within a day (a run
    cut short is sent again and resumes, so a tight limit costs little)."""
    if seconds is None:
        return 24 * 60
    return min(24 * 60, max(30, 2 * seconds / 60 + 10))


@dataclass
class Tracked:
    assignment: Assignment
    job: object
    attempt: int = 1
    state: str = "PENDING"
    ended: float | None = None   # time.monotonic() when its end was first seen


def follow(assignments: list[Assignment], submit, echo=print, at_once: int | None = None,
           retries: int = RETRIES, poll_s: float = 2.0, on_done=None,
           record=None, grace_s: float = 15.0, look_s: float = 60.0) -> list[str]:
    """Submit `assignments` (`submit(a list of them) -> jobs`, all at once or `at_once` at a time)
    and follow them: a state change gets one line, a job that ends without its result is sent
    again (it resumes from its checkpoint) up to `retries` times, then named as failed with its
    log. `on_done(assignment, result)` for each finished job; `record(tracked)` after each
    change. The scheduler is asked afresh about every job each `look_s`, so that a job that
    ended without a result (its node lost, killed) is seen within that time. Returns the failed
    assignments' names."""
    waiting, live, failed = list(assignments), [], []
    t0 = looked = time.perf_counter()
    done = 0

    def send(batch: list[Assignment], attempt: int = 1) -> None:
        for assignment, job in zip(batch, submit(batch)):
            live.append(Tracked(assignment, job, attempt))
            echo(f"[{done + len(live)}/{len(assignments)}] submitted {assignment.name}: "
                 f"job {job.job_id}"
                 + (f" (attempt {attempt})" if attempt > 1 else ""))

    while waiting or live:
        room = len(waiting) if at_once is None else max(0, at_once - len(live))
        if room and waiting:
            batch, waiting = waiting[:room], waiting[room:]
            send(batch)
            if record:
                record(live)
        time.sleep(poll_s)
        every_job = time.perf_counter() - looked >= look_s
        if every_job:
            looked = time.perf_counter()
        _ask_afresh(live, every_job)
        for t in list(live):
            raw = str(t.job.state or "UNKNOWN")   # SLURM's may carry more: "CANCELLED by 42"
            state = raw if raw in ENDED else raw.split()[0]
            if state != t.state and state not in ENDED:
                echo(f"      {state.lower():9s} {t.assignment.name} (job {t.job.job_id})")
            t.state = state
            if state not in ENDED or not _readable(t, grace_s):
                continue
            live.remove(t)
            why = _outcome(t.job)
            if why is None:
                done += 1
                result = t.job.result()
                how = "restored from the remote" if result["restored"] else "trained"
                echo(f"      done      {t.assignment.name} ({how}, job {t.job.job_id}, "
                     f"{clock(result['seconds'])})  ({done}/{len(assignments)}, "
                     f"{clock(time.perf_counter() - t0)} so far)")
                if on_done:
                    on_done(t.assignment, result)
            elif t.attempt <= retries:
                echo(f"      failed    {t.assignment.name} (job {t.job.job_id}): {why}; sent again "
                     "(a run resumes from its checkpoint)")
                send([t.assignment], t.attempt + 1)
            else:
                failed.append(t.assignment.name)
                echo(f"      FAILED {t.assignment.name} (job {t.job.job_id}, attempt {t.attempt}): "
                     f"{why}; log: {t.job.paths.stdout}")
            if record:
                record(live)
    return failed


def _ask_afresh(live: list[Tracked], every_job: bool = False) -> None:
    """Ask the scheduler afresh when a job it last showed running has written its result, or
    about every job (`every_job`). submitit asks sacct ever more rarely as jobs age (every 2 s at
    first, then at half the time since the last submission, up to every 10 minutes), so a
    finished job would otherwise read as running that long, and one that died without a result
    too. One forced look per watcher covers all of its jobs."""
    watchers = {id(w): w for t in live
                if t.state not in ENDED and (every_job or t.job.paths.result_pickle.exists())
                and (w := getattr(t.job, "watcher", None)) is not None}
    for watcher in watchers.values():
        try:
            watcher.update_if_long_enough("force")
        except NotImplementedError:   # no scheduler behind it (submitit's local executor)
            pass


def _readable(t: Tracked, grace_s: float) -> bool:
    """Whether an ended job's outcome can be read now: its result file is there, it was
    cancelled, or `grace_s` has passed since its end was first seen (a shared filesystem may
    show a finished job's result late). Ended jobs wait out their grace side by side while the
    others are followed. A cancelled job waits for nothing: it reads as cancelled whatever it
    left, and a result shown too late costs only a job that restores the cell from the remote."""
    if t.job.paths.result_pickle.exists() or t.state == "CANCELLED":
        return True
    if t.ended is None:
        t.ended = time.monotonic()
    return time.monotonic() - t.ended >= grace_s


def _outcome(job) -> str | None:
    """None for a job that returned its result; else why not, in one line. A cancelled job reads
    as cancelled whatever it left: scancel sends its command SIGTERM first, and the job's own
    process then records the command's end as its error."""
    error = job.exception() if job.paths.result_pickle.exists() else None
    if job.paths.result_pickle.exists() and error is None:
        return None
    state = str(job.state)
    if state.startswith("CANCELLED"):   # "CANCELLED by <uid>": scancel, or an administrator
        return f"cancelled ({state.lower()})"
    if error is None:
        return f"ended without a result (state {state})"
    lines = [line for line in str(error).splitlines() if line.strip() and not line.startswith("-")]
    cause = next((line for line in reversed(lines)
                  if "AssignmentFailed" in line or "Error" in line),
                 lines[-1] if lines else "failed")
    return cause.split("AssignmentFailed: ", 1)[-1].strip()


def reproduce(kind: str, targets: tuple[str, ...] = (), ensemble: bool = False, echo=print,
              cpu: dict | None = None, options: dict[str, str] | None = None, gpu: bool = False,
              at_once: int | None = None, retries: int = RETRIES, projected=None,
              workers_in_process: bool = True, workdir: Path | None = None,
              poll_s: float = 5.0) -> int:
    """`arithrepro repro --executor KIND`: the pipeline (or `targets` and what they need) with
    its pending training cells as `kind` jobs (`options`: slurm parameters, checked by check()
    first; `gpu`: a GPU per job; `retries`: the times a job is sent again), the rest run here as `arithrepro repro`
    runs it (`at_once` stages, also the local jobs at once); the exit status.
    `projected(training stages)`: their projected seconds, for the jobs' time limits."""
    from dvc.repo import Repo

    from arithrepro.repro import _reproduce, holding

    def here(stages: tuple[str, ...], restore: bool) -> int:
        return _reproduce(at_once, False, stages, echo, workers_in_process, cpu, pull=restore)

    with holding(Path(Repo.find_root()), echo):
        return _on(kind, targets, ensemble, here, echo, cpu, options, gpu, at_once, retries,
                   projected, workdir, poll_s)


def _on(kind, targets, ensemble, run_here, echo, cpu, options, gpu, at_once, retries, projected,
        workdir, poll_s) -> int:
    """`run_here(targets, pull)` runs stages in this workspace: first what the cells need, then,
    once every cell is in the remote, the whole plan with `pull` (the cells restored, the
    reports run)."""
    import json

    from dvc.repo import Repo

    from arithrepro.io import write_text
    from arithrepro.repro import plan
    from arithrepro.schedule import order_jobs
    from arithrepro.slots import slots, thread_env

    root = Path(Repo.find_root())
    remote = default_remote(root)
    workdir = Path(workdir or root / ".dvc" / "tmp" / "cluster")
    workers, threads, _ = slots(cpu, at_once)   # local jobs share this machine's cores
    if kind == "slurm":   # a node's cores are the scheduler's to give: the params' count, or 1
        fixed = (cpu or {}).get("threads")
        threads = fixed if isinstance(fixed, int) else 1
    if options and "cpus_per_task" in options:   # checked, with the scheduler: check()
        threads = _value(options["cpus_per_task"])
    env = thread_env(cpu, threads)
    names, upstream, pending, runs = plan(targets)
    jobs = order_jobs(names, upstream, pending, runs, ensemble=ensemble)
    training_jobs = [j for j in jobs if j.runs]
    if not training_jobs:
        return run_here(targets, False)
    training = {s for j in training_jobs for s in j.stages}
    # the stages the cells need, run here first: their outputs go to the remote for the jobs
    needs = {u for s in training for u in upstream[s]} - training
    if needs and run_here(tuple(sorted(needs)), False):
        return 1
    known = cached(sorted(training), remote)
    todo = [j for j in training_jobs if not set(j.stages) <= known]
    for j in training_jobs:   # an earlier submission's, whose command stopped before its end
        if j not in todo:
            forget(workdir / "checkouts", Assignment(j.stages, []).folder)
    echo(f"{len(training)} training cells: {len(training) - len(known & training)} to run as "
         f"{kind} jobs" + (f", {len(known & training)} already in the remote's run cache"
                          if known & training else ""))
    if needs:
        _dvc(["push", *(["--remote", remote] if remote else []), *sorted(needs)], root)
    seconds = projected({s: r for j in todo for s, r in zip(j.stages, j.runs)})\
        if projected and todo else {}
    workdir.mkdir(parents=True, exist_ok=True)
    source = snapshot(root, workdir, remote)
    assignments = [Assignment(j.stages, _argv(j), runs=j.runs,
                              pulls=sorted({u for s in j.stages for u in upstream[s]} - set(j.stages)),
                              seconds=sum(seconds.get(s, 0) for s in j.stages) or None)
                   for j in todo]
    submit = submitter(kind, workdir, options or {}, threads, gpu, source, env)

    def record(live):
        write_text(workdir / "jobs.json", json.dumps(
            {t.assignment.stages[0]: {"job": t.job.job_id, "attempt": t.attempt, "state": t.state,
                                "log": str(t.job.paths.stdout)} for t in live}, indent=1))

    def finished(assignment: Assignment, result: dict) -> None:
        forget(workdir / "checkouts", assignment.folder)

    failed = follow(assignments, submit, echo, at_once=workers if kind == "local" else None,
                    retries=retries, poll_s=poll_s, on_done=finished, record=record)
    if failed:
        echo(f"{len(failed)} of {len(assignments)} jobs failed; the others are in the remote. "
             "The same command again sends only what is missing.")
        return 1
    echo("collecting: dvc repro --pull, stage by stage")
    return run_here(targets, True)


def forget(checkouts: Path, folder: str) -> None:
    """An assignment's checkout, once the remote holds its outputs; kept while a job holds its
    lock."""
    import fcntl

    lock = checkouts / f"{folder}.lock"
    if not lock.exists():
        shutil.rmtree(checkouts / folder, ignore_errors=True)
        return
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        shutil.rmtree(checkouts / folder, ignore_errors=True)
        lock.unlink(missing_ok=True)


def submitter(kind: str, workdir: Path, options: dict[str, str], threads: int, gpu: bool,
              source: Source, env: dict):
    """`submit(cells) -> jobs`, in the cells' order: one array per stage family (SLURM: one
    sbatch with --array), its time limit its longest assignment's."""
    from arithrepro.checkout import working_dir

    job = AssignmentJob()

    def submit(batch: list[Assignment]):
        families: dict[str, list[Assignment]] = {}
        for assignment in batch:
            families.setdefault(assignment.stages[0].split("@")[0], []).append(assignment)
        made = {}
        for group in families.values():
            longest = max((c.seconds or 0 for c in group), default=0) or None
            ex = executor(kind, workdir / "jobs", options, threads, gpu, minutes_for(longest))
            # a job starts where it was submitted from, and Python imports from there first:
            # from the work folder, a job imports the installed arithrepro, not a checkout's copy
            with working_dir(workdir):
                try:
                    if len(group) == 1:
                        jobs = [ex.submit(job, group[0], source, str(workdir), env)]
                    else:
                        n = len(group)
                        jobs = ex.map_array(job, group, [source] * n, [str(workdir)] * n,
                                            [env] * n)
                except (submitit.core.utils.FailedJobError, subprocess.CalledProcessError) as err:
                    raise refused(err, group[0].stages[0].split("@")[0], ex) from None
            made.update({id(c): j for c, j in zip(group, jobs)})
        return [made[id(c)] for c in batch]

    return submit


def _argv(job: Job) -> list[list[str]]:
    """In a job's checkout: an ensemble as the scheduler trains it; a cell through DVC, its
    inputs pulled from the remote."""
    if len(job.stages) > 1:
        return job.argv
    return [["dvc", "repro", "--single-item", "--pull", job.stages[0]]]


def _dvc(args: list[str], root: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, capture_output=True,
                          text=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    if proc.returncode:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"dvc {' '.join(args)}: {last[0]}")
    return proc.stdout


def default_remote(root: Path) -> str | None:
    """The DVC remote jobs push to and the workspace pulls from: DVC's default. Without one,
    the jobs' results would have no way back: refused before anything runs."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        name = repo.config["core"].get("remote")
        if not name:
            raise ValueError("the jobs send their results through a DVC remote, and this "
                             "workspace has no default one: `dvc remote add -d NAME URL` "
                             "(docs/remote.md)")
        return name


def cached(stages: list[str], remote: str | None, root: Path | None = None) -> set[str]:
    """The training stages the remote's run cache holds for their present command, params and
    inputs: trained before (here, in a job, on another machine), so not trained again."""
    from dvc.repo import Repo

    from arithrepro.checkout import working_dir

    found = set()
    with working_dir(root or Path.cwd()), Repo() as repo:   # DVC finds stages from the cwd
        try:
            repo.stage_cache.pull(remote)
        except Exception as err:   # a remote without run-cache support, a failed pull: nothing known
            print(f"warning: remote {remote or '(default)'}: its run cache could not be read "
                  f"({type(err).__name__}: {str(err).strip() or 'no message'}); every cell counts "
                  "as not trained", file=sys.stderr)
            return found
        for name in stages:
            stage = repo.stage.collect(name)[0]
            try:
                stage.save_deps()
            except Exception:   # an input not here yet: the job will make it
                continue
            if repo.stage_cache._load(stage):   # DVC has no public lookup of one entry
                found.add(name)
    return found
