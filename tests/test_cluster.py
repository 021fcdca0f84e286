"""`arithrepro repro --executor`: the training cells as batch jobs (arithrepro/cluster.py).

The local executor runs the path a SLURM cluster takes (submitit's pickled job, its own checkout,
pull, `dvc repro --single-item --pull`, push of outputs and run cache, collection by `dvc repro
--pull`) as real processes here, on looped's smoke grid: one job is killed with its whole
process tree once its run has written a checkpoint, is sent again and resumes, and the collected
outputs are the smoke run's to the bit. The same path against a real SLURM: tests/test_slurm.py,
which also kills a job mid-training and collects in a second clone; where it can run (SLURM's
packages installed, root), the local executor's two scenarios of that are left to it. What a
one-node cluster cannot show (partitions, accounts, GPUs) is checked here against submitit's own
mocked SLURM."""

import json
import os
import shutil
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from arithrepro import cluster
from tests.workspace import (CELLS, TARGET, Run, leftovers, make_clone, outputs, sh,
                             slurm_cluster)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
# a job killed mid-training and a second clone's collection: tests/test_slurm.py runs both
# against a real SLURM wherever one can start
in_test_slurm = pytest.mark.skipif(slurm_cluster().missing() is None,
                                   reason="a real SLURM runs here: tests/test_slurm.py covers it")
# one job at a time: the fault tests beside this file time their kills
LOCAL = ("arithrepro", "repro", "--executor", "local", "-j", "1")


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """A workspace with smoke params and a local-directory DVC remote, both committed."""
    where = tmp_path_factory.mktemp("cluster")
    ws = make_clone(where / "ws")
    # one thread per stage, as the smoke run trained, with one stage or job at a time (-j 1)
    sh(["arithrepro", "compose-params", "-S", "profile=smoke", "-S", "cpu.threads=1"], ws)
    sh(["dvc", "remote", "add", "-d", "store", str(where / "store")], ws)
    sh(["git", "add", "-A"], ws)
    sh(["git", "commit", "-qm", "smoke params, the remote"], ws)
    return where


def _kill_tree(pid: int) -> None:
    """What a scheduler does to a preempted job: every process of it, at once."""
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


@in_test_slurm
def test_a_job_killed_mid_training_is_sent_again_and_the_collection_equals_the_smoke_run(
        shared, smoke_first_run):
    ws = shared / "ws"
    work = ws / ".dvc" / "tmp" / "cluster"
    run = Run(ws, (*LOCAL, "--retries", "1", TARGET))
    killed = None
    end = time.monotonic() + 300
    while run.proc.poll() is None and killed is None and time.monotonic() < end:
        for ck in work.glob("checkouts/*/runs/looped/*/checkpoint.pt"):
            stage = "train-looped@" + ck.parent.name
            try:
                job = json.loads((work / "jobs.json").read_text())[stage]["job"]
            except (FileNotFoundError, ValueError, KeyError):
                continue
            _kill_tree(int(job))
            killed = stage
            break
        time.sleep(0.002)
    assert killed, run.text[-3000:]
    assert run.wait() == 0, run.text[-3000:]
    out = run.text
    assert f"failed    {killed} (job " in out and "sent again" in out, out
    # the job sent again resumed the run from its checkpoint; each other cell trained once
    logs = "".join(p.read_text() for p in work.glob("jobs/*_log.*"))
    assert "resumed at step" in logs, logs[-3000:]
    assert out.count("(trained, job") == len(CELLS), out
    # collected: the cells restored from the run cache, the rest run here
    for assignment in CELLS:
        assert f"Stage 'train-looped@{assignment}' is cached - skipping run" in out, out
    assert "Running stage 'train-looped@" not in out, out
    assert outputs(ws) == outputs(smoke_first_run.saved)
    assert not leftovers(ws), leftovers(ws)
    assert not list(work.glob("checkouts/*/")), "a finished cell's checkout was kept"
    assert "Running stage" not in sh(["dvc", "repro", TARGET], ws)
    assert "up to date" in sh([*LOCAL, TARGET], ws)


@in_test_slurm
def test_a_second_workspace_sends_no_job_for_cells_the_remote_holds(shared, smoke_first_run):
    """After the test above: a clone of the same commit collects every cell from the remote's
    run cache; no job is submitted."""
    if not (shared / "store").is_dir():
        pytest.skip("needs the jobs of the test above in the remote")
    ws = shared / "second"
    sh(["git", "clone", "-q", str(shared / "ws"), str(ws)], shared)
    out = sh([*LOCAL, TARGET], ws)
    assert f"{len(CELLS)} already in the remote's run cache" in out, out
    assert "submitted" not in out, out
    assert "Running stage 'train-looped@" not in out, out
    assert outputs(ws) == outputs(smoke_first_run.saved)


def test_a_configurations_seeds_train_as_one_ensemble_job(tmp_path):
    """--ensemble: a configuration's two pending seeds are one job (one process, one checkout),
    DVC records both as its own run would, and the remote's run cache then holds both cells.
    (One configuration: how configurations are grouped is tests/test_repro.py's.)"""
    ws = make_clone(tmp_path / "ws")
    sh(["arithrepro", "compose-params", "-S", "profile=smoke", "-S", "looped.seeds=[0,1]",
        "-S", "looped.models=[standard]"], ws)
    sh(["dvc", "remote", "add", "-d", "store", str(tmp_path / "store")], ws)
    out = sh([*LOCAL, "--ensemble", "train-looped"], ws)
    assert out.count("(+1 as one ensemble): job") == 1 and out.count("(trained, job") == 1, out
    for seed in (0, 1):
        record = json.loads((ws / f"runs/looped/standard-notebook-{seed}/train.json").read_text())
        assert record["trained_with"] == 2 and record["seed"] == seed
    assert "Running stage" not in sh(["dvc", "repro", "train-looped"], ws)
    again = make_clone(tmp_path / "again")
    shutil.copy(ws / "params.yaml", again / "params.yaml")
    sh(["dvc", "remote", "add", "-d", "store", str(tmp_path / "store")], again)
    assert "2 already in the remote's run cache" in sh([*LOCAL, "train-looped"], again)


def test_a_run_cache_that_cannot_be_read_is_one_warning_and_counts_as_empty(tmp_path, capsys):
    sh(["dvc", "init", "-q", "--no-scm"], tmp_path)
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: echo\n")
    assert cluster.cached(["s"], "nowhere", tmp_path) == set()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: remote nowhere: its run cache could not "
                                               "be read (") and "not trained" in err[0], err


def test_without_a_remote_nothing_starts(tmp_path):
    ws = make_clone(tmp_path / "ws")
    sh(["arithrepro", "compose-params", "-S", "profile=smoke"], ws)
    out = sh([*LOCAL, TARGET], ws, check=False)
    assert "no default one: `dvc remote add -d NAME URL`" in out, out
    assert not (ws / "data" / "looped").exists()


def test_slurm_options_are_checked_before_anything_runs(tmp_path):
    ws = make_clone(tmp_path / "ws")
    sh(["dvc", "remote", "add", "-d", "store", str(tmp_path / "store")], ws)
    # on a cluster's login node srun is there, and the first would submit
    no_srun = [(["--executor", "slurm"], 'Could not detect "srun"')]\
        if shutil.which("srun") is None else []
    for args, said in [*no_srun,
                       (["--executor", "slurm", "--slurm", "cpus_per_task=two"],
                        "cpus_per_task=two: expected a whole number")]:
        out = sh(["arithrepro", "repro", *args, TARGET], ws, check=False)
        assert said in out and out.count("\n") <= 2, out      # one line
        assert not (ws / "data" / "looped").exists()
    for args, said in [(["--slurm", "partition=gpu"], "--slurm is for --executor slurm"),
                       (["--executor", "slurm", "--slurm", "partition"], "expected KEY=VALUE"),
                       (["--executor", "local", "--dry"], "--executor with --dry")]:
        proc = sh(["arithrepro", "repro", *args], tmp_path, check=False)
        assert said in proc, proc


def test_the_sbatch_script_asks_what_the_cells_need(tmp_path):
    """submitit's mocked SLURM: a job array of two cells, one GPU each, the projection's time
    limit, the user's partition; a parameter sbatch does not know is refused by name."""
    from submitit.slurm.test_slurm import mocked_slurm

    with mocked_slurm():
        ex = cluster.executor("slurm", tmp_path, {"partition": "gpu", "account": "lab",
                                                  "setup": '["module load cuda"]'},
                              threads=4, gpu=True, minutes=cluster.minutes_for(1800))
        script = ex._make_submission_file_text("python -m x", "uid")
        cpu_job = cluster.executor("slurm", tmp_path, {"gpus_per_node": "0"}, 1, True, 30)
        assert "--gpus-per-node" not in cpu_job._make_submission_file_text("x", "uid")
        jobs = ex.map_array(sorted, [[2, 1], [4, 3]])
        with pytest.raises(ValueError, match="--slurm: .*partitio"):
            cluster.executor("slurm", tmp_path, {"partitio": "gpu"}, 1, False, 30)
    for line in ("--partition=gpu", "--account=lab", "--gpus-per-node=1", "--cpus-per-task=4",
                 "--time=70", "--ntasks-per-node=1"):
        assert f"#SBATCH {line}" in script, script
    assert "\nmodule load cuda\n" in script, script
    assert len(jobs) == 2 and len({j.job_id.split("_")[0] for j in jobs}) == 1   # one array


def test_time_limits_follow_the_projection_within_a_day():
    assert cluster.minutes_for(None) == 24 * 60
    assert cluster.minutes_for(60) == 30            # set-up dominates a short run
    assert cluster.minutes_for(3600) == 130
    assert cluster.minutes_for(10 ** 6) == 24 * 60  # longer runs resume in the next job


class FakeJob:
    """A job that ends after `polls` looks, with a result or without one."""

    ids = iter(range(100, 10 ** 6))

    def __init__(self, tmp: Path, ok: bool, polls: int = 1):
        self.job_id = str(next(self.ids))
        self.left, self.ok = polls, ok
        self.paths = SimpleNamespace(result_pickle=tmp / f"{self.job_id}.pkl",
                                     stdout=tmp / f"{self.job_id}.out")

    @property
    def state(self):
        if self.left:
            self.left -= 1
            return "RUNNING"
        if self.ok:
            self.paths.result_pickle.touch()
        return "COMPLETED" if self.ok else "NODE_FAIL"

    def exception(self):
        return None

    def result(self):
        return {"restored": [], "seconds": 1.0}


def test_follow_sends_a_failed_job_again_then_gives_up_naming_its_log(tmp_path):
    assignments = [cluster.Assignment([f"train-x@c-{i}"], []) for i in range(3)]
    plan = {"train-x@c-0": [True], "train-x@c-1": [False, True], "train-x@c-2": [False] * 3}
    most = []

    def submit(batch):
        running = sum(1 for line in lines if "submitted" in line) - len(
            [line for line in lines if "done" in line or "failed" in line or "FAILED" in line])
        most.append(running + len(batch))
        return [FakeJob(tmp_path, plan[c.stages[0]].pop(0)) for c in batch]

    lines = []
    failed = cluster.follow(assignments, submit, lines.append, at_once=2, retries=2, poll_s=0,
                            grace_s=0)
    assert failed == ["train-x@c-2"]
    text = "\n".join(lines)
    assert text.count("submitted train-x@c-2") == 3 and "(attempt 3)" in text
    assert "FAILED train-x@c-2" in text and str(tmp_path) in text
    assert "ended without a result (state NODE_FAIL)" in text
    assert text.count("done      ") == 2
    assert max(most) <= 2, most


class Clock:
    """time for cluster.follow: sleep moves the clock instead of waiting."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    perf_counter = monotonic

    def sleep(self, seconds):
        self.now += seconds


class LateJob(FakeJob):
    """Ends without a result file; the file shows up `late` seconds later (None: never)."""

    def __init__(self, tmp: Path, clock: Clock, late: float | None):
        super().__init__(tmp, ok=False, polls=0)
        self.clock, self.late, self.seen = clock, late, None

    @property
    def state(self):
        self.seen = self.clock.now if self.seen is None else self.seen
        if self.late is not None and self.clock.now - self.seen >= self.late:
            self.paths.result_pickle.touch()
        return "FAILED"


def test_ended_jobs_wait_out_their_grace_side_by_side(tmp_path, monkeypatch):
    """A result file a shared filesystem shows late is waited for, but the jobs that ended
    together wait together: two without a result are sent again one grace after they ended,
    not two; one whose file appears within the grace counts as done."""
    clock = Clock()
    monkeypatch.setattr(cluster, "time", clock)
    plan = {"train-x@c-0": [None, 3.0], "train-x@c-1": [None, 3.0], "train-x@c-2": [3.0]}
    sent = []

    def submit(batch):
        sent.extend((c.stages[0], clock.now) for c in batch)
        return [LateJob(tmp_path, clock, plan[c.stages[0]].pop(0)) for c in batch]

    lines = []
    assignments = [cluster.Assignment([f"train-x@c-{i}"], []) for i in range(3)]
    failed = cluster.follow(assignments, submit, lines.append, poll_s=1, grace_s=10)
    assert failed == []
    again = [when for stage, when in sent if when > 0]
    assert again == [11.0, 11.0], sent   # ended at the first look (t = 1), sent at t = 11
    text = "\n".join(lines)
    assert text.count("ended without a result (state FAILED); sent again") == 2, text
    assert text.count("done      ") == 3, text


class Watcher:
    """submitit's InfoWatcher as far as follow uses it: states asked of sacct, refreshed only
    when forced (an aged watcher's next look is minutes away)."""

    def __init__(self):
        self.forced = 0
        self.states = {}

    def update_if_long_enough(self, mode):
        assert mode == "force"
        self.forced += 1
        self.states.update(self.pending)


class WatchedJob(FakeJob):
    """Writes its result at the second look; the watcher shows COMPLETED only once forced."""

    watcher = Watcher()

    def __init__(self, tmp: Path):
        super().__init__(tmp, ok=True, polls=0)
        self.looks = 0
        self.watcher.pending = {self.job_id: "COMPLETED"}

    @property
    def state(self):
        self.looks += 1
        if self.looks >= 2:
            self.paths.result_pickle.touch()
        return self.watcher.states.get(self.job_id, "RUNNING")


def test_a_result_written_makes_follow_ask_the_scheduler_afresh(tmp_path):
    lines = []
    job = WatchedJob(tmp_path)
    failed = cluster.follow([cluster.Assignment(["train-x@c-0"], [])], lambda batch: [job],
                            lines.append, poll_s=0, grace_s=0)
    assert failed == [] and job.watcher.forced == 1 and job.looks == 3
    assert sum("done      train-x@c-0" in line for line in lines) == 1


class DeadJob(FakeJob):
    """Died at once without a result; its aged watcher shows it RUNNING until forced to look."""

    def __init__(self, tmp: Path):
        super().__init__(tmp, ok=False, polls=0)
        self.watcher = Watcher()
        self.watcher.pending = {self.job_id: "NODE_FAIL"}

    @property
    def state(self):
        return self.watcher.states.get(self.job_id, "RUNNING")


class Bounded(Clock):
    """A clock that stops a follow loop going on past `limit` seconds."""

    limit = 1000.0

    def sleep(self, seconds):
        super().sleep(seconds)
        assert self.now <= self.limit, "still following after the clock's limit"


def test_a_job_dead_without_a_result_is_seen_at_the_next_look_at_every_job(tmp_path, monkeypatch):
    clock = Bounded()
    monkeypatch.setattr(cluster, "time", clock)
    jobs, sent = [DeadJob(tmp_path), FakeJob(tmp_path, ok=True)], []

    def submit(batch):
        sent.append(clock.now)
        return [jobs.pop(0)]

    lines = []
    failed = cluster.follow([cluster.Assignment(["train-x@c-0"], [])], submit, lines.append,
                            poll_s=5, grace_s=0, look_s=60)
    assert failed == [] and sent == [0.0, 60.0], (sent, lines)
    assert "ended without a result (state NODE_FAIL); sent again" in "\n".join(lines)


class CancelledJob(FakeJob):
    """A job scancel ended after its own process recorded `error` (None: it had finished)."""

    state = "CANCELLED by 0"

    def __init__(self, tmp: Path, error):
        super().__init__(tmp, ok=False, polls=0)
        self.error = error
        self.paths.result_pickle.touch()

    def exception(self):
        return self.error


def test_a_cancelled_job_reads_as_cancelled_whatever_its_command_left(tmp_path):
    """scancel sends a job's command SIGTERM before SLURM marks it CANCELLED: the job's process
    records the command's end (exited -15) as its error, and the line still says cancelled (a
    real SLURM shows this; tests/test_slurm.py). A finished job's result wins over any state."""
    killed = RuntimeError("AssignmentFailed: `dvc repro ...` exited -15")
    assert cluster._outcome(CancelledJob(tmp_path, killed)) == "cancelled (cancelled by 0)"
    assert cluster._outcome(CancelledJob(tmp_path, None)) is None


def test_a_job_refuses_code_other_than_its_checkout(tmp_path):
    (tmp_path / "arithrepro").mkdir()
    (tmp_path / "arithrepro" / "cluster.py").write_text("# not the installed file\n")
    with pytest.raises(cluster.AssignmentFailed, match=r"arithrepro/cluster.py \(keep the code"):
        cluster.same_code(tmp_path)


def test_the_snapshot_carries_uncommitted_files_and_deletions(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (ws / "kept.txt").write_text("a")
    (ws / "gone.txt").write_text("b")
    (ws / "edited.txt").write_text("c")
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        sh(["git", *argv], ws, **env)
    (ws / "edited.txt").write_text("c2")
    (ws / "gone.txt").unlink()
    (ws / "new.txt").write_text("d")
    (ws / "staged.txt").write_text("e")
    sh(["git", "add", "staged.txt"], ws)
    source = cluster.snapshot(ws, tmp_path / "work", None)
    (ws / "edited.txt").write_text("c3")   # an edit after submission reaches no job
    cluster.prepare(tmp_path / "co", source)
    co = tmp_path / "co"
    assert {p.name: p.read_text() for p in co.glob("*.txt")} ==\
        {"kept.txt": "a", "edited.txt": "c2", "new.txt": "d", "staged.txt": "e"}
    # a later submission's checkout keeps the runs' checkpoints
    (co / "runs" / "t").mkdir(parents=True)
    (co / "runs" / "t" / "checkpoint.pt").write_bytes(b"ck")
    cluster.prepare(co, cluster.snapshot(ws, tmp_path / "work2", None))
    assert (co / "runs" / "t" / "checkpoint.pt").read_bytes() == b"ck"
    assert (co / "edited.txt").read_text() == "c3"
    assert os.listdir(tmp_path).count("co.part") == 0


def test_each_stage_family_is_one_array_with_its_longest_cells_time(tmp_path):
    """Cells of one family share an sbatch (--array) and the time limit of the longest of them;
    another family gets its own; the jobs come back in the cells' order."""
    from submitit.slurm.test_slurm import mocked_slurm

    assignments = [cluster.Assignment(["train-expr@gpt-small-0"], [], seconds=600.0),
                   cluster.Assignment(["train-looped@standard-notebook-0"], [], seconds=60.0),
                   cluster.Assignment(["train-expr@lstm-small-0"], [], seconds=3600.0)]
    source = cluster.Source(str(tmp_path), "0" * 40, str(tmp_path))
    with mocked_slurm():
        jobs = cluster.submitter("slurm", tmp_path, {"partition": "gpu"}, 2, True, source,
                                 {})(assignments)
    arrays = [j.job_id.split("_")[0] for j in jobs]
    assert arrays[0] == arrays[2] != arrays[1], arrays
    scripts = {a: next(tmp_path.glob(f"jobs/{a}_*submission.sh")).read_text() for a in arrays}
    assert "#SBATCH --time=130" in scripts[arrays[0]] and "--array=0-1" in scripts[arrays[0]]
    assert "#SBATCH --time=30" in scripts[arrays[1]] and "--array" not in scripts[arrays[1]]


def test_a_local_gpu_job_sees_a_gpu_and_a_cpu_job_none(tmp_path):
    """submitit's local executor sets CUDA_VISIBLE_DEVICES from the GPUs a job asks for."""
    assert cluster.executor("local", tmp_path, {}, 1, True, 30).parameters["gpus_per_node"] == 1
    assert cluster.executor("local", tmp_path, {}, 1, False, 30).parameters["gpus_per_node"] == 0


def _sinfo(tmp_path, monkeypatch, gres: str, status: int = 0) -> None:
    """A stand-in sinfo on PATH that prints `gres` (one line per node) or fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "sinfo"
    fake.write_text("#!/bin/sh\n" + (f"echo 'sinfo: error: {gres}' >&2\nexit {status}\n"
                                     if status else f"printf '{gres}'\n"))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("gres, gives", [("(null)\\n(null)\\n", False), ("gpu:4\\n", True),
                                         ("(null)\\ngpu:a100:2(S:0-1),shard:8\\n", True),
                                         ("shard:8\\n", False), ("", False)],
                         ids=["no-gres", "gpus", "one-node-of-two", "no-gpu-gres", "no-nodes"])
def test_a_job_asks_for_a_gpu_with_device_auto_only_where_the_cluster_has_one(
        tmp_path, monkeypatch, gres, gives):
    _sinfo(tmp_path, monkeypatch, gres)
    assert cluster.gives_gpus("debug") is gives
    assert cluster.wants_gpu("slurm", "auto", "cpu", None) is gives
    assert cluster.wants_gpu("slurm", "cuda", "cpu", None) is True
    assert cluster.wants_gpu("slurm", "cpu", "cuda", None) is False
    assert cluster.wants_gpu("local", "auto", "cpu", None) is False
    assert cluster.wants_gpu("local", "auto", "cuda", None) is True
    assert cluster.wants_gpu(None, "cuda", "cuda", None) is False


def test_sinfo_failing_is_one_line_naming_the_command(tmp_path, monkeypatch):
    _sinfo(tmp_path, monkeypatch, "invalid partition specified: nope", status=1)
    with pytest.raises(ValueError, match=r"^`sinfo --noheader --format=%G --partition nope`: "
                                         r"sinfo: error: invalid partition specified: nope$"):
        cluster.gives_gpus("nope")


def test_an_array_sbatch_refuses_is_one_line_with_what_it_asked(tmp_path):
    """submitit's mocked SLURM with sbatch failing as a CPU cluster does on a GPU request."""
    import subprocess

    from submitit.core.utils import FailedJobError
    from submitit.slurm.test_slurm import mocked_slurm

    with mocked_slurm():
        ex = cluster.executor("slurm", tmp_path, {"partition": "debug"}, 1, True, 30)
    cause = subprocess.CalledProcessError(1, ["sbatch"])
    err = FailedJobError("sbatch: error: Invalid generic resource (gres) specification")
    err.__cause__ = cause
    line = str(cluster.refused(err, "train-looped", ex))
    assert "\n" not in line and line.startswith(
        "sbatch refused the train-looped jobs: sbatch: error: Invalid generic resource"), line
    assert "--gpus-per-node=1" in line and "--partition=debug" in line, line
