"""`arithrepro repro`: DVC's stages side by side (arithrepro/repro.py). The plan and the
scheduler on made-up graphs, then a small DVC project run by it for real."""

import os
import subprocess
import sys
import shutil
import time
from pathlib import Path

import pytest
import yaml

from arithrepro.schedule import Job, order_jobs, progress, run_jobs
from tests.workspace import sh

ROOT = Path(__file__).resolve().parents[1]

# a -> b -> c (c depends on b, b on a); d alone; e depends on a and d
UPSTREAM = {"a": set(), "b": {"a"}, "c": {"b"}, "d": set(), "e": {"a", "d"}}
ORDER = ["a", "d", "b", "e", "c"]


def names(jobs):
    return [j.stages for j in jobs]


def test_a_changed_stage_runs_with_everything_downstream_of_it():
    assert sorted(j.stages[0] for j in order_jobs(ORDER, UPSTREAM, {"a"})) == ["a", "b", "c", "e"]
    assert names(order_jobs(ORDER, UPSTREAM, {"d"})) == [["d"], ["e"]]
    assert order_jobs(ORDER, UPSTREAM, set()) == []


def test_jobs_wait_for_their_upstream_jobs_only():
    jobs = {j.stages[0]: j for j in order_jobs(ORDER, UPSTREAM, {"a", "d"})}
    assert jobs["a"].upstream == set() and jobs["d"].upstream == set()
    assert jobs["e"].upstream == {"a", "d"} and jobs["c"].upstream == {"b"}


def test_a_stage_is_one_single_item_repro():
    (job,) = order_jobs(ORDER, UPSTREAM, {"d"})[:1]
    assert job.argv == [["dvc", "--wait-for-lock", "repro", "--single-item", "d"]]


def test_with_pull_a_stage_is_restored_from_the_remote_where_it_can_be():
    (job,) = order_jobs(ORDER, UPSTREAM, {"d"}, pull=True)[:1]
    assert job.argv == [["dvc", "--wait-for-lock", "repro", "--single-item", "--pull", "d"]]


def test_progress_shares_the_work_left_among_the_jobs_at_once():
    assert progress(2, 6, 60, 80, 2) == "(2/6, 1m00s so far, about 40s left)"
    assert progress(1, 3, 10, 20, 4) == "(1/3, 10s so far, about 10s left)"   # 2 left, 2 slots used
    assert progress(3, 3, 4000, 0, 2) == "(3/3, 1h06m)"


def test_the_time_left_counts_training_by_its_projection_and_the_rest_at_its_pace():
    jobs = [Job([n], [["true"]]) for n in ("gen", "train-a", "train-b", "report")]
    lines = []

    class Done:
        def poll(self):
            return 0

    run_jobs(jobs, 1, lambda job, slot: Done(), echo=lines.append,
             expected={"train-a": 600.0, "train-b": 1200.0})
    done = [line for line in lines if "done" in line]
    # after gen (instant): both trainings projected, report at gen's pace
    assert done[0].endswith("about 30m00s left)"), done[0]
    assert done[1].endswith("about 20m00s left)"), done[1]   # train-b's projection left


def test_pull_with_ensemble_is_refused_in_one_line():
    out = subprocess.run([sys.executable, "-m", "arithrepro.cli", "repro", "--pull", "--ensemble"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "--pull with --ensemble" in out.stderr


def test_pending_seeds_of_one_configuration_train_as_one_ensemble_then_are_committed():
    stages = ["gen", "train-x@m-s-0", "train-x@m-s-1", "train-x@m-s-2", "train-x@m-t-0",
              "train-y@m-s-1", "train-x@m-r-0", "eval@m-s-1"]
    upstream = {s: {"gen"} for s in stages[1:]} | {"gen": set(), "eval@m-s-1": {"train-x@m-s-1"}}
    from arithrepro.runs import Config

    # t: another width; r: s at another rate and data fraction (its free setting)
    widths, rates, fractions = {"t": 16}, {"r": 0.01}, {"r": 0.3}

    def cell(stage):   # train-<task>@<model>-<size>-<seed>
        model, size, seed = stage.split("@")[1].split("-")
        config = Config(stage[6], model, size, (int(seed),),
                        architecture={"width": widths.get(size, 8)},
                        loop={"lr": rates.get(size, 0.001)},
                        settings={"r_train": fractions.get(size, 0.5)}, free=("r_train",),
                        stage=stage.split("@")[0], item=(model, size))
        return config.runs[0]

    cells = {s: cell(s) for s in stages[1:7]}
    assert all(run.cell == s for s, run in cells.items())
    pending = set(stages) - {"gen", "train-x@m-s-0"}   # seed 0 is trained already
    jobs = order_jobs(stages, upstream, pending, cells)
    by_first = {j.stages[0]: j for j in jobs}
    ensemble = by_first["train-x@m-s-1"]
    assert ensemble.stages == ["train-x@m-s-1", "train-x@m-s-2", "train-x@m-r-0"]
    # a job is a view of configurations: the runs of its cells, the seeds of m-s and of m-r,
    # which differs from it in its rate and its free setting alone
    assert [(r.config.name, r.seed) for r in ensemble.runs] == [("m-s", 1), ("m-s", 2), ("m-r", 0)]
    assert by_first["eval@m-s-1"].runs == () and by_first["train-x@m-t-0"].runs[0].config.name == "m-t"
    assert ensemble.argv == [["arithrepro", "train", "--task", "x", "m-s-1", "m-s-2", "m-r-0"],
                             ["dvc", "--wait-for-lock", "commit", "--force",
                              "train-x@m-s-1", "train-x@m-s-2", "train-x@m-r-0"]]
    # another configuration, another task: alone, through DVC
    assert by_first["train-x@m-t-0"].argv[0][2] == "repro"
    assert by_first["train-y@m-s-1"].stages == ["train-y@m-s-1"]
    # what waits for a grouped cell waits for its group
    assert by_first["eval@m-s-1"].upstream == {"train-x@m-s-1"}
    # training first: the long jobs start before the short ones
    assert all(j.stages[0].startswith("train-") for j in jobs[:3])


class Proc:
    """A process that ends after `ticks` polls with `code`, on the scheduler's clock."""

    def __init__(self, log, busy, job, ticks, code):
        self.log, self.busy, self.job, self.left, self.code = log, busy, job, ticks, code

    def poll(self):
        self.left -= 1
        if self.left > 0:
            return None
        self.log.append(("end", self.job.stages[0]))
        self.busy.pop(self.job.stages[0])
        return self.code


def simulate(jobs, workers, ticks, failing=()):
    """Run `jobs` on fake processes; each job's slot is free again once it ends."""
    log, busy = [], {}

    def start(job, slot):
        assert 0 <= slot < workers and slot not in busy.values()
        busy[job.stages[0]] = slot
        log.append(("start", job.stages[0]))
        return Proc(log, busy, job, ticks.get(job.stages[0], 1), 1 if job.stages[0] in failing else 0)

    failed = run_jobs(jobs, workers, start, echo=lambda *_: None)
    return log, failed


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr("arithrepro.schedule.time.sleep", lambda s: None)


def concurrency(log):
    running, most = 0, 0
    for kind, _ in log:
        running += 1 if kind == "start" else -1
        most = max(most, running)
    return most


def test_no_more_than_the_workers_run_at_once_and_none_before_its_upstream():
    jobs = order_jobs(ORDER, UPSTREAM, {"a", "d"})
    log, failed = simulate(jobs, 2, {"a": 3, "d": 1, "b": 2})
    assert failed == [] and concurrency(log) == 2
    at = {(k, s): i for i, (k, s) in enumerate(log)}
    for job in jobs:
        for u in job.upstream:
            assert at[("end", u)] < at[("start", job.stages[0])]
    assert {s for k, s in log if k == "end"} == {"a", "b", "c", "d", "e"}
    log, _ = simulate(order_jobs(ORDER, UPSTREAM, {"a", "d"}), 1, {})
    assert concurrency(log) == 1


def test_after_a_failure_nothing_new_starts_and_the_running_jobs_finish():
    jobs = order_jobs(ORDER, UPSTREAM, {"a", "d"})
    log, failed = simulate(jobs, 2, {"a": 5, "d": 1}, failing={"d"})
    assert failed == ["d"]
    assert ("end", "a") in log                      # a was running: it finished
    assert not {"b", "c", "e"} & {s for k, s in log if k == "start"}


def test_job_names_say_how_many_train_as_one_ensemble():
    assert Job(["t@a-0", "t@a-1", "t@a-2"], []).name == "t@a-0 (+2 as one ensemble)"
    assert Job(["s"], []).name == "s"


# --- a small DVC project, run by `arithrepro repro` -----------------------------------------

def pipeline(source="1", square="(x + n) ** 2"):
    """source -> square@1..4 -> total, each square sleeping a little so that they overlap."""
    return yaml.safe_dump({"stages": {
        "source": {"cmd": f"python -c \"open('source.txt', 'w').write('{source}')\"",
                   "outs": ["source.txt"]},
        "square": {"matrix": {"n": [1, 2, 3, 4]},
                   "cmd": "python -c \"import os, time; time.sleep(0.2); n = ${item.n}; "
                          "print('cores', len(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS']); "
                          f"x = int(open('source.txt').read()); "
                          f"open('sq${{item.n}}.txt', 'w').write(str({square}))\"",
                   "deps": ["source.txt"], "outs": ["sq${item.n}.txt"]},
        "total": {"cmd": "python -c \"open('total.txt', 'w').write(str(sum(int(open("
                         "'sq%d.txt' % n).read()) for n in (1, 2, 3, 4))))\"",
                  "deps": [f"sq{n}.txt" for n in (1, 2, 3, 4)], "outs": ["total.txt"]}}})


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_a_dvc_project_runs_side_by_side_and_ends_as_dvc_repro_leaves_it(tmp_path):
    sh(["git", "init", "-q"], tmp_path)
    sh(["dvc", "init", "-q"], tmp_path)
    (tmp_path / "dvc.yaml").write_text(pipeline())
    sh(["git", "add", "-A"], tmp_path)
    sh(["git", "commit", "-qm", "pipeline"], tmp_path)
    # a dry run says what would run, in order, and runs nothing
    out = sh(["arithrepro", "repro", "--dry", "--jobs", "2"], tmp_path)
    assert "6 of 6 stages to run" in out and "would run source" in out
    assert out.index("would run source") < out.index("would run square@1") \
        < out.index("would run total")
    assert not list(tmp_path.glob("*.txt")) and "nothing ran" in out
    # a target and what it reads, as `dvc repro square@2`
    out = sh(["arithrepro", "repro", "--jobs", "2", "square@2"], tmp_path)
    assert "2 of 2 stages to run" in out and not (tmp_path / "sq1.txt").exists()
    assert (tmp_path / "sq2.txt").read_text() == "9"
    refused = subprocess.run(["arithrepro", "repro", "square@9"], cwd=tmp_path, capture_output=True,
                             text=True, env={**os.environ, "PATH": f"{Path(sys.executable).parent}"
                                                                   f"{os.pathsep}{os.environ['PATH']}"})
    assert refused.returncode == 2 and "error: stage square@9: not in dvc.yaml" in refused.stderr
    out = sh(["arithrepro", "repro", "--jobs", "2"], tmp_path)
    assert "4 of 6 stages to run, 2 at a time with 1 thread each" in out
    assert (tmp_path / "total.txt").read_text() == str(4 + 9 + 16 + 25)
    assert "Running stage" not in sh(["dvc", "repro"], tmp_path)      # DVC finds it all done
    assert "up to date" in sh(["dvc", "status"], tmp_path)
    logs = tmp_path / "logs" / "repro"
    assert sorted(p.name for p in logs.iterdir()) == [
        "source.log", "square-1.log", "square-2.log", "square-3.log", "square-4.log", "total.log"]
    # each of the two slots on its own core, torch told to use one thread
    assert "cores 1 1" in (logs / "square-1.log").read_text()
    # a change upstream reruns what follows it, and nothing runs twice
    (tmp_path / "dvc.yaml").write_text(pipeline(source="2"))
    out = sh(["arithrepro", "repro", "-j", "2"], tmp_path)
    assert "6 of 6 stages" in out
    assert (tmp_path / "total.txt").read_text() == str(9 + 16 + 25 + 36)
    assert "up to date" in sh(["arithrepro", "repro"], tmp_path)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pull_restores_a_pushed_run_in_one_transfer_and_a_changed_one_stage_by_stage(tmp_path):
    """--pull in a clone of a pushed run: every stage's outputs in one `dvc pull`, none runs;
    where a stage's command changed, each stage is pulled or run on its own."""
    made, here = tmp_path / "made", tmp_path / "here"
    made.mkdir()
    sh(["git", "init", "-q"], made)
    sh(["dvc", "init", "-q"], made)
    sh(["dvc", "remote", "add", "-d", "store", str(tmp_path / "store")], made)
    (made / "dvc.yaml").write_text(pipeline())
    sh(["dvc", "repro"], made, OMP_NUM_THREADS="1")
    sh(["dvc", "push"], made)
    sh(["git", "add", "-A"], made)
    sh(["git", "commit", "-qm", "run"], made)
    sh(["git", "clone", "-q", str(made), str(here)], tmp_path)
    # a target: it and what it reads, nothing else
    out = sh(["arithrepro", "repro", "--pull", "-j", "1", "square@2"], here)
    assert "pulling the DVC remote's outputs of 2 stages" in out, out
    assert sorted(p.name for p in here.glob("*.txt")) == ["source.txt", "sq2.txt"]
    out = sh(["arithrepro", "repro", "--pull", "-j", "1"], here)
    assert "pulling the DVC remote's outputs of 4 stages" in out, out
    assert "Data and pipelines are up to date." in out and "Running stage" not in out, out
    assert (here / "total.txt").read_text() == str(4 + 9 + 16 + 25)
    # what a DVC process killed mid-copy leaves beside an output goes; another .tmp stays
    partial = [here / ".lFeNlGfM3QLDICJAfDuP5A.tmp", here / "sq1.txt.QJ2n_xk0Yd-3RbF1vTq9aw.tmp"]
    for path in [*partial, here / ".sq1.txt.k2j4h5g6.tmp"]:
        path.write_text("half")
    out = sh(["arithrepro", "repro", "-j", "1"], here)
    assert "removed what a killed DVC process left half-copied: " \
           ".lFeNlGfM3QLDICJAfDuP5A.tmp, sq1.txt.QJ2n_xk0Yd-3RbF1vTq9aw.tmp" in out, out
    assert not any(p.exists() for p in partial) and (here / ".sq1.txt.k2j4h5g6.tmp").exists()
    (here / ".sq1.txt.k2j4h5g6.tmp").unlink()
    # square's command changed: nothing up front; source restored by its own --pull, the rest run
    shutil.rmtree(here / ".dvc" / "cache")
    for f in here.glob("*.txt"):
        f.unlink()
    (here / "dvc.yaml").write_text(pipeline(square="(x + n) ** 3"))
    out = sh(["arithrepro", "repro", "--pull", "-j", "1"], here, OMP_NUM_THREADS="1")
    assert "pulling" not in out and "6 of 6 stages to run" in out, out
    assert "Pulling data for stage: 'source'" in out, out
    assert "Running stage 'source'" not in out and "Running stage 'square@1'" in out, out
    assert (here / "total.txt").read_text() == str(8 + 27 + 64 + 125)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_failing_stage_stops_the_run_with_its_log_named(tmp_path):
    sh(["git", "init", "-q"], tmp_path)
    sh(["dvc", "init", "-q"], tmp_path)
    (tmp_path / "dvc.yaml").write_text(pipeline(square="(x + n) ** 2 // (n - 3)"))
    out = sh(["arithrepro", "repro", "-j", "2"], tmp_path, check=False)
    assert "FAILED square@3" in out and "logs/repro/square-3.log" in out
    assert "ZeroDivisionError" in (tmp_path / "logs" / "repro" / "square-3.log").read_text()
    assert not (tmp_path / "total.txt").exists()


# --- the stage worker: many stages, one process --------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
CELLS = [("expr", "gpt-small-0"), ("modular", "gpt-sin-sanity-0"), ("expr", "gpt-small-0")]


def _smoke_workspace(path: Path) -> Path:
    path.mkdir()
    sh(["arithrepro", "compose-params", "--conf", str(ROOT / "conf"), "-S", "profile=smoke"], path)
    sh(["arithrepro", "generate-datasets", "--task", "expr"], path)
    return path


def _trained(path: Path) -> dict:
    """Every trained tensor and best validation loss under runs/, by file."""
    import json

    import torch

    out = {}
    for f in sorted(path.glob("runs/**/model.pt")):
        out[str(f.relative_to(path))] = torch.load(f, weights_only=False)["state_dict"]
    for f in sorted(path.glob("runs/**/train.json")):
        record = json.loads(f.read_text())
        out[str(f.relative_to(path))] = [record["best_val_loss"], record["best_step"], record["steps"]]
    return out


def test_stages_run_in_one_worker_train_as_in_processes_of_their_own(tmp_path):
    """What one stage leaves in the worker (random state, caches, loggers, threads) reaches no
    later stage: trainings run one after another in one worker, the first again at the end,
    give the bits that each gives in a fresh process."""
    import torch

    from arithrepro.processes import Worker
    from arithrepro.schedule import Job

    env = {**os.environ, "OMP_NUM_THREADS": "1", "DVC_NO_ANALYTICS": "1"}
    alone = _smoke_workspace(tmp_path / "alone")
    together = tmp_path / "worker"
    shutil.copytree(alone, together)
    for task, run in CELLS[:-1]:
        sh(["arithrepro", "train", "--task", task, run], alone, OMP_NUM_THREADS="1")
    want = _trained(alone)
    worker = Worker(env, None, cwd=together)
    try:
        for i, (task, run) in enumerate(CELLS):
            if i == len(CELLS) - 1:  # the first cell once more, after the others
                shutil.rmtree(together / "runs" / task / run)
            log = together / f"job{i}.log"
            worker.submit(Job([run], [["arithrepro", "train", "--task", task, run]]), log)
            while (code := worker.poll()) is None:
                time.sleep(0.05)
            assert code == 0, log.read_text()[-2000:]
            assert f"train {task} {run}" in log.read_text()
    finally:
        worker.close()
    got = _trained(together)
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, list):
            assert got[key] == value, key
        else:
            for name, tensor in value.items():
                assert torch.equal(got[key][name], tensor), (key, name)


def test_each_command_a_worker_runs_logs_its_own_params_reads(tmp_path, monkeypatch):
    """The stage worker runs many commands in one process: each writes its line of params
    reads when it ends (params_reads.flush), as its own process would at exit."""
    import json

    from arithrepro import params_reads
    from arithrepro.params_reads import recording

    log = tmp_path / "reads.jsonl"
    monkeypatch.setenv(params_reads.ENV, str(log))
    first = recording({"a": {"b": 1, "c": 2}, "d": 3})
    first["a"]["b"]
    params_reads.flush(["train", "x"])
    second = recording({"a": {"b": 1, "c": 2}, "d": 3})
    second["d"]
    params_reads.flush(["evaluate", "y"])
    params_reads.flush(["nothing"])   # a command that loaded no params writes nothing
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [{"argv": ["train", "x"], "read": ["a.b"]},
                     {"argv": ["evaluate", "y"], "read": ["d"]}]


LOCK = """schema: '2.0'
stages:
  make-a:
    cmd: echo a > a.txt
    outs:
    - path: a.txt
      hash: md5
      md5: 60b725f10c9c85c70d97880dfe8191b3
      size: 2
  train-x@cell-0:
    cmd: echo b > b.txt
    deps:
    - path: a.txt
      hash: md5
      md5: 60b725f10c9c85c70d97880dfe8191b3
      size: 2
    outs:
    - path: b.txt
      hash: md5
      md5: 3b5d5c3712955042212316173ccf37be
      size: 2
"""


def test_a_cut_short_lock_file_keeps_its_whole_entries(tmp_path):
    """dvc.lock cut anywhere (a DVC process killed while writing it): what DVC's schema takes
    is left alone, else the whole entries are kept, else the file goes; never a file DVC
    refuses."""
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA

    from arithrepro.lockfile import repair_lockfile

    second = LOCK.index("  train-x@")
    said = []
    for cut in range(len(LOCK) + 1):
        (tmp_path / "dvc.lock").write_text(LOCK[:cut])
        repair_lockfile(tmp_path, said.append)
        if not (tmp_path / "dvc.lock").exists():
            assert cut <= second, cut      # only a file without one whole entry goes
            continue
        text = (tmp_path / "dvc.lock").read_text()
        stages = COMPILED_LOCKFILE_SCHEMA(yaml.safe_load(text)).get("stages") or {}
        if cut >= second:
            assert "make-a" in stages and text.startswith(LOCK[:second]), cut
    assert any("kept its whole entries (1), dropped the cut one" in line for line in said), said
    (tmp_path / "dvc.lock").write_text(LOCK)
    repair_lockfile(tmp_path, said.append)
    assert (tmp_path / "dvc.lock").read_text() == LOCK
