"""`arithrepro repro --executor slurm` against a real SLURM: a one-node cluster of Debian's
packages brought up for this module (scripts/slurm_cluster.py) and torn down after it.

Looped's grid at two seeds goes out as one job array of CPU jobs (`device: auto` on a cluster
without GPUs), and every way a job ends early happens once, each after its run wrote a
checkpoint: preempted (`scontrol requeue`), its processes killed, cancelled (`scancel`), and
signalled (SIGUSR2 to the job's steps, which slurmctld sends 90 s before a time limit under
submitit's `--signal=USR2@90`; submitit checkpoints and requeues the job). The signal comes from
`scancel --signal` rather than a real one-minute limit: slurmctld checks limits about every 30 s,
and submitit counts a signal before the limit's last 90 s as a preemption, which it requeues
without counting it against `max_num_timeout`. The submitting command is killed while jobs
run and started again. Every cell trains from step 0 once, each job that ended early resumes from
its checkpoint, and the collection equals a local `arithrepro repro` of the same grid (run
meanwhile: the cluster mostly waits then). A second clone then collects everything without
submitting a job.

A requeued job may start again only after SLURM's fixed delay (121 s); the tests let it start at
once (`scontrol update StartTime=now`). What one node cannot show (partitions, accounts, GPUs)
stays with submitit's mocked sbatch in tests/test_cluster.py. Without the packages or root, the
module skips with the reason."""

import json
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.workspace import TARGET, Run, leftovers, make_clone, outputs, sh, slurm_cluster

# a time limit of the test's own: no projection of the jobs' time on this machine first
SUBMIT = ("arithrepro", "repro", "--executor", "slurm", "--slurm", "partition=debug",
          "--slurm", "time=30")
# the fault grid: long enough that a job is still training when its fault arrives
LONG = ("-S", "looped.seeds=[0,1]", "-S", "looped.train.steps=100",
        "-S", "looped.train.checkpoint_every=10", "-S", "looped.train.val_every=50")
LONG_CELLS = [f"{m}-notebook-{s}" for s in (0, 1) for m in ("standard", "looped")]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    sc = slurm_cluster()
    why = sc.missing()
    if why:
        pytest.skip(f"no SLURM cluster here: {why}")
    # four CPU slots on this two-core machine: the four cells' jobs start at once (each trains
    # on one thread; their setup, cloning and DVC, is mostly waiting)
    cluster = sc.start(cpus=4)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in cluster.env.items():
            mp.setenv(key, value)
        try:
            yield cluster
        finally:
            cluster.stop()
    left = [p.info["name"] for p in psutil.process_iter(["name", "cmdline"])
            if str(cluster.folder) in " ".join(p.info["cmdline"] or [])]
    assert not left, f"daemons left running: {left}"


def _workspace(where: Path, *overrides: str) -> Path:
    ws = make_clone(where / "ws")
    sh(["arithrepro", "compose-params", "-S", "profile=smoke", "-S", "cpu.threads=1",
        *overrides], ws)
    sh(["dvc", "remote", "add", "-d", "store", str(where / "store")], ws)
    sh(["git", "add", "-A"], ws)
    sh(["git", "commit", "-qm", "params, the remote"], ws)
    return ws


def _job(work: Path, stage: str) -> str | None:
    try:
        return json.loads((work / "jobs.json").read_text())[stage]["job"]
    except (FileNotFoundError, ValueError, KeyError):
        return None


def _processes(job: str) -> list[psutil.Process]:
    """The processes a job runs (its script, srun's task, submitit, DVC, the training), found by
    the job's ids in their environment; slurmstepd itself carries none."""
    array, _, task = job.partition("_")
    want = {"SLURM_ARRAY_JOB_ID": array, "SLURM_ARRAY_TASK_ID": task} if task \
        else {"SLURM_JOB_ID": job}
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if all(env.get(k) == v for k, v in want.items()):
            found.append(proc)
    return found


def _release(slurm, job: str, timeout: float = 60) -> None:
    """A requeued job may start again only after SLURM's delay: let it start now."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        shown = slurm.run("scontrol", "show", "job", job, check=False)
        if "JobState=PENDING" in shown:
            slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job} was not requeued within {timeout} s")


def _fault(slurm, kind: str, job: str) -> None:
    if kind == "preempted":
        slurm.run("scontrol", "requeue", job)
        _release(slurm, job)
    elif kind == "killed":
        procs = _processes(job)
        assert procs, f"no process of job {job}"
        for proc in procs:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
    elif kind == "cancelled":
        slurm.run("scancel", job)
    elif kind == "signalled":   # what slurmctld sends a job before its time limit
        slurm.run("scancel", "--signal=USR2", job)
        _release(slurm, job)


def _starts(work: Path) -> dict[str, list[str]]:
    """Per cell, how each of its trainings in a job began: "0" from scratch, else the step it
    resumed at (the progress bar of each `dvc repro` a job ran, in the jobs' logs)."""
    starts: dict[str, list[str]] = {}
    for log in sorted(work.glob("jobs/*_log.*")):
        sections = re.split(r"^\$ ", log.read_text(errors="replace"), flags=re.M)
        for section in sections:
            m = re.match(r"dvc repro --single-item --pull train-looped@(\S+)", section)
            bar = re.search(r"train(?: \(resumed at step (\d+)\))?:\s+\d+%", section)
            if m and bar:
                starts.setdefault(m.group(1), []).append(bar.group(1) or "0")
    return starts


def test_jobs_ended_every_way_and_the_submitter_killed_lose_nothing_and_train_nothing_twice(
        slurm, tmp_path, request):
    ws = _workspace(tmp_path, *LONG)
    work = ws / ".dvc" / "tmp" / "cluster"
    faults = dict(zip((f"train-looped@{c}" for c in LONG_CELLS),
                      ("preempted", "killed", "cancelled", "signalled")))
    run = Run(ws, (*SUBMIT, "--retries", "2", TARGET), env=slurm.env)
    done: dict[str, str] = {}
    end = time.monotonic() + 300
    while run.proc.poll() is None and len(done) < len(faults) and time.monotonic() < end:
        for ck in work.glob("checkouts/*/runs/looped/*/checkpoint.pt"):
            stage = f"train-looped@{ck.parent.name}"
            job = _job(work, stage)
            if stage in faults and stage not in done and job:
                _fault(slurm, faults[stage], job)
                done[stage] = job
        time.sleep(0.01)
    assert len(done) == len(faults), (done, run.text[-3000:])
    # the local run the collection is compared with, while the cluster mostly waits (submitit
    # on the cancelled job's result, SLURM on the requeued ones)
    local = _workspace(tmp_path / "local", *LONG)
    alone = Run(local, ("arithrepro", "repro", "--yes", "--jobs", "1", TARGET))   # --yes: no projection
    request.addfinalizer(alone.kill)
    # device auto on a cluster without GPUs: CPU jobs, the four cells one array
    ids = re.findall(r"submitted train-looped@\S+: job (\d+)_\d+$", run.text, flags=re.M)
    assert len(ids) == 4 and len(set(ids)) == 1, run.text
    script = next((work / "jobs").glob(f"{ids[0]}_submission.sh")).read_text()
    assert "#SBATCH --partition=debug" in script and "gpus" not in script, script
    assert "#SBATCH --time=30" in script and "repro: timing" not in run.text, script
    # the command that submitted them sees the cancelled and the killed job end and sends them
    # again; then it is killed while they run, and the same command runs again
    seen = (r"failed +train-looped@standard-notebook-1 \(job \S+\): cancelled .*; sent again",
            r"failed +train-looped@looped-notebook-0 \(job \S+\): ended without a result "
            r"\(state FAILED\); sent again")
    end = time.monotonic() + 120
    while run.proc.poll() is None and not all(re.search(p, run.text) for p in seen) \
            and time.monotonic() < end:
        time.sleep(0.2)
    assert all(re.search(p, run.text) for p in seen), run.text[-3000:]
    run.kill()
    again = sh([*SUBMIT, "--retries", "2", TARGET], ws)
    starts = _starts(work)
    for cell in LONG_CELLS:   # from step 0 once; each job that ended early resumed
        assert starts[cell][0] == "0" and starts[cell].count("0") == 1, starts
        assert len(starts[cell]) >= 2, starts
    assert "Running stage 'train-looped@" not in again.split("collecting:")[-1], again
    assert alone.wait() == 0, alone.text[-3000:]
    assert outputs(ws, LONG_CELLS) == outputs(local, LONG_CELLS)
    assert not leftovers(ws), leftovers(ws)
    assert not list(work.glob("checkouts/*/")), "a finished cell's checkout was kept"
    # a second clone of the same commit collects every cell from the remote: no job
    second = tmp_path / "second"
    sh(["git", "clone", "-q", str(ws), str(second)], tmp_path)
    out = sh([*SUBMIT, TARGET], second)
    assert f"{len(LONG_CELLS)} already in the remote's run cache" in out and "submitted" not in out
    assert outputs(second, LONG_CELLS) == outputs(local, LONG_CELLS)
