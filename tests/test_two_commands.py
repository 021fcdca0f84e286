"""Two commands in one workspace: a second `dvc repro`, `dvc exp run` or `arithrepro repro`
started while one runs is refused, and the first finishes unharmed; a queue worker killed in the
middle of an experiment leaves its cells resumable. On a small DVC project whose first stage
waits for a file the test writes, so that "while one runs" is a fact, not a race."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.workspace import drained_queue, queue_workers, sh, start_queue

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

ENV = {**os.environ, "DVC_NO_ANALYTICS": "1",
       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

# Each stage writes its output from python; the gated one first writes started.txt into the
# signals folder and waits there for go.txt. held writes n (knobs.yaml); after doubles it.
GATE = ("w = pathlib.Path('{signals}'); (w / 'started.txt').write_text('x'); "
        "[time.sleep(0.05) for _ in iter(lambda: (w / 'go.txt').exists(), True)]; ")
WRITE = {"held": "pathlib.Path('held.txt').write_text('${n}')",
         "after": "pathlib.Path('after.txt').write_text(2 * pathlib.Path('held.txt').read_text())"}


def command(stage: str, gated: bool, signals: Path) -> str:
    return ("python -c \"import pathlib, time; "
            + (GATE.format(signals=signals) if gated else "") + WRITE[stage] + "\"")


def project(path: Path, signals: Path, gate: str = "held") -> Path:
    """A git + DVC repository with the two stages, committed."""
    path.mkdir()
    sh(["git", "init", "-q"], path)
    sh(["dvc", "init", "-q"], path)
    (path / "knobs.yaml").write_text("n: 3\n")   # not params.yaml: arithrepro reads that one
    (path / "dvc.yaml").write_text(yaml.safe_dump({"vars": ["knobs.yaml"], "stages": {
        "held": {"cmd": command("held", gate == "held", signals),
                 "params": [{"knobs.yaml": ["n"]}], "outs": ["held.txt"]},
        "after": {"cmd": command("after", gate == "after", signals), "deps": ["held.txt"],
                  "outs": ["after.txt"]}}}))
    sh(["git", "add", "-A"], path)
    sh(["git", "commit", "-qm", "pipeline"], path)
    return path


@pytest.fixture
def ws(tmp_path):
    signals = tmp_path / "signals"
    signals.mkdir()
    return project(tmp_path / "ws", signals), signals


def start(args, cwd) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def wait_for(path: Path, proc: subprocess.Popen | None = None, seconds: float = 120) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"ended before {path.name}:\n{proc.stdout.read()[-3000:]}")
        assert time.monotonic() < end, f"no {path}"
        time.sleep(0.05)


def finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    return out


@pytest.mark.parametrize("first, second, refusal", [
    (["dvc", "repro"], ["dvc", "repro"], "held.txt' is busy"),
    (["dvc", "exp", "run"], ["dvc", "exp", "run"], "held.txt' is busy"),
    (["arithrepro", "repro"], ["arithrepro", "repro"],
     "error: another `arithrepro repro` (pid "),
    (["arithrepro", "repro"], ["dvc", "repro"], "held.txt' is busy"),
    (["dvc", "repro"], ["arithrepro", "repro"], "error: `dvc repro` (pid "),
])
def test_a_second_command_is_refused_and_the_first_finishes(ws, first, second, refusal):
    path, signals = ws
    running = start(first, path)
    try:
        wait_for(signals / "started.txt", running)
        refused = subprocess.run(second, cwd=path, env=ENV, capture_output=True, text=True,
                                 timeout=120)
        assert refused.returncode != 0, refused.stdout + refused.stderr
        said = refused.stdout + refused.stderr
        assert refusal in said and "Traceback" not in said, said
        (signals / "go.txt").write_text("go")
        if first[:3] == ["dvc", "exp", "run"]:
            # DVC 3.67's workspace experiment does not survive a refused second one: that one's
            # clean-up removes the first's experiment refs, so the first ends without recording
            # its experiment. Nothing else is lost: its outputs and dvc.lock are whole, and the
            # same command again records the experiment without running a stage.
            out, _ = running.communicate(timeout=300)
            assert running.returncode != 0 and "Failed to reproduce experiment" in out, out
            again = sh(first, path)
            assert "Running stage" not in again and "Ran experiment(s)" in again, again
        else:
            finish(running)
    finally:
        if running.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
    assert (path / "after.txt").read_text() == "33"
    assert sh(["dvc", "status"], path).strip().endswith("Data and pipelines are up to date.")


def test_a_killed_queue_worker_leaves_its_cells_resumable(tmp_path):
    """The worker dies (SIGKILL) while the experiment's second stage runs. `dvc queue kill`
    marks the task failed (DVC shows it running otherwise); the experiment queued again under
    its name takes the first stage from the run cache and runs the second."""
    signals = tmp_path / "signals"
    signals.mkdir()
    path = project(tmp_path / "ws", signals, gate="after")
    sh(["dvc", "exp", "run", "--queue", "-n", "cell", "-S", "knobs.yaml:n=4"], path)
    try:
        start_queue(path)
        wait_for(signals / "started.txt")
        victims = queue_workers(path)
        assert victims, "no queue worker found"
        for proc in victims:
            proc.kill()
        psutil.wait_procs(victims, timeout=30)
        task = re.search(r"^(\w+)\s+cell\s.*Running$", sh(["dvc", "queue", "status"], path),
                         flags=re.M)
        assert task, sh(["dvc", "queue", "status"], path)
        sh(["dvc", "queue", "kill", task.group(1)], path)
        assert re.search(rf"^{task.group(1)}\s+cell\s.*Failed$", sh(["dvc", "queue", "status"],
                                                                      path), flags=re.M)
        (signals / "go.txt").write_text("go")
        sh(["dvc", "exp", "run", "--queue", "-n", "cell", "-S", "knobs.yaml:n=4"], path)
        start_queue(path)
        rows = drained_queue(path)
        assert re.search(r"^\w+\s+cell\s.*Success$", rows, flags=re.M), rows
        log = sh(["dvc", "queue", "logs", "cell"], path)
        assert "Stage 'held' is cached - skipping run" in log and "Running stage 'after'" in log, log
    finally:
        sh(["dvc", "queue", "stop", "--kill"], path, check=False)
    sh(["dvc", "exp", "apply", "cell"], path)
    assert (path / "after.txt").read_text() == "44"


def test_a_rwlock_file_cut_short_by_a_kill_is_removed_by_arithrepro_repro(ws):
    """DVC rewrites .dvc/tmp/rwlock in place; killed while writing it, it leaves the file empty
    and every DVC command stops on it. With no DVC process left in the workspace, `arithrepro
    repro` removes it, says so, and runs."""
    path, signals = ws
    (signals / "go.txt").write_text("go")
    (path / ".dvc" / "tmp").mkdir(exist_ok=True)
    (path / ".dvc" / "tmp" / "rwlock").write_text("")
    stopped = subprocess.run(["dvc", "status"], cwd=path, env=ENV, capture_output=True, text=True)
    assert stopped.returncode != 0 and "Unable to read RWLock-file" in stopped.stderr
    out = sh(["arithrepro", "repro"], path)
    assert "removed .dvc/tmp/rwlock: cut short by a DVC process killed while writing it" in out
    assert (path / "after.txt").read_text() == "33"


def test_a_cut_short_rwlock_is_left_alone_while_a_dvc_command_runs(ws):
    path, signals = ws
    running = start(["dvc", "repro"], path)
    try:
        wait_for(signals / "started.txt", running)
        (path / ".dvc" / "tmp" / "rwlock").write_text("{")
        refused = subprocess.run(["arithrepro", "repro"], cwd=path, env=ENV, capture_output=True,
                                 text=True, timeout=120)
        assert refused.returncode == 1 and refused.stderr.startswith("error: `dvc repro` (pid ")
        assert (path / ".dvc" / "tmp" / "rwlock").read_text() == "{"
    finally:
        os.killpg(running.pid, signal.SIGKILL)
        running.wait()
