"""A clone of this checkout to run DVC in, and the shell the pipeline tests run commands with."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def shell_env(**extra_env) -> dict:
    """The environment sh() runs commands in."""
    return {**os.environ, **extra_env, "DVC_NO_ANALYTICS": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@localhost",
            "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@localhost"}


def sh(args, cwd, check=True, **extra_env):
    """Run a command in `cwd` with this interpreter's scripts first on PATH and a git identity;
    its stdout and stderr, or AssertionError with their tails if it failed."""
    proc = subprocess.run(args, cwd=cwd, env=shell_env(**extra_env), capture_output=True,
                          text=True)
    if check and proc.returncode:
        raise AssertionError(f"{' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


def start_queue(path: Path, jobs: int = 1, **extra_env) -> None:
    """`dvc queue start -j JOBS`. The worker it starts outlives it and holds the output it was
    given: the output goes nowhere, so that this returns when the command does, as in a terminal,
    not when the worker exits (a worker held this way ran its queue alone)."""
    subprocess.run(["dvc", "queue", "start", "-j", str(jobs)], cwd=path,
                   env=shell_env(**extra_env), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def queue_gone(path: Path, timeout: float = 120) -> None:
    """Wait until no queue worker of the repository at `path` is left (an idle one exits on its
    own after 10 s): a worker stopping as a task arrives would leave the task queued."""
    end = time.monotonic() + timeout
    while any(map(_alive, queue_workers(path))):
        if time.monotonic() > end:
            raise AssertionError(f"queue workers still running after {timeout:.0f} s")
        time.sleep(0.2)


def slurm_cluster():
    """scripts/slurm_cluster.py as a module: the one-node SLURM the cluster tests run against."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("slurm_cluster",
                                                  ROOT / "scripts" / "slurm_cluster.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


def make_clone(dest: Path) -> Path:
    """The checkout's files (tracked and untracked-but-not-ignored), committed in a fresh repo."""
    from arithrepro.checkout import copy_checkout

    return copy_checkout(ROOT, dest, "clone")


def ran_stages(out: str) -> set[str]:
    """The stages a `dvc repro` / `dvc exp run` output says it ran, or an `arithrepro repro`
    with several jobs says it started (its lines `[k/n] start <stage>`)."""
    return ({line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")}
            | set(re.findall(r"^\[\d+/\d+\] start (\S+)", out, flags=re.M)))


@dataclass(frozen=True)
class FirstRun:
    """The smoke profile's first run in a clone: its output, and copies of the metrics/ and
    plots/ it wrote, so that the checks of those files do not depend on the experiments the
    later tests run in the same clone."""

    out: str
    clone: Path
    saved: Path
    reads: Path   # ARITHREPRO_PARAMS_LOG: each stage process's arguments and the keys it read

    @property
    def summary(self) -> dict:
        return json.loads(self.read("metrics/summary.json"))

    def read(self, name: str) -> str:
        return (self.saved / name).read_text()


def first_smoke_run(root: Path) -> FirstRun:
    """The whole pipeline, smoke profile, in a clone under `root`: made once however many test
    processes ask (the first to take the lock makes it, the others wait and read it), so that
    the test files built on it can run on separate workers. README command 1's way (`arithrepro
    repro`, two stages at once, one thread each, as the tests that run stages again use, so
    that their metrics agree to the bit)."""
    import fcntl

    base = root / "smoke-first-run"
    with open(root / "smoke-first-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = base / "out.txt"
        clone, saved = base / "clone", base / "saved"
        if not done.exists():
            shutil.rmtree(base, ignore_errors=True)   # a run cut short before
            clone.mkdir(parents=True)
            saved.mkdir()
            make_clone(clone)
            sh(["arithrepro", "compose-params", "-S", "profile=smoke"], clone)
            out = sh(["arithrepro", "repro", "--jobs", "2"], clone,
                     ARITHREPRO_PARAMS_LOG=str(saved / "params-reads.jsonl"))
            for folder in ("metrics", "plots"):
                shutil.copytree(clone / folder, saved / folder)
            # the whole workspace as the run left it, DVC cache included: the "GPU machine" of
            # the remote tests, whatever the later tests do to the clone
            shutil.copytree(clone, saved / "gpu", symlinks=True)
            done.write_text(out)
        return FirstRun(done.read_text(), clone, saved, saved / "params-reads.jsonl")


def queue_workers(path: Path) -> list:
    """The DVC experiment queue's worker processes for the repository at `path`, and every
    process they run (psutil.Process objects)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "queue-worker" in cmd and str(path) in (proc.info["cwd"] or "") + cmd:
            found += [proc, *proc.children(recursive=True)]
    return found


def drained_queue(path: Path, timeout: float = 600) -> str:
    """`dvc queue status` once nothing is queued or running in the repository at `path`. Each
    call is a DVC process (about 1.5 s of CPU), so it is asked only when no queue worker has a
    command running, not every second while a cell trains."""
    end, status = time.monotonic() + timeout, "(not asked: a worker was running a command)"
    while True:
        if not any(_children(p) for p in queue_workers(path)):
            status = sh(["dvc", "queue", "status"], path)
            if not re.search(r"\s(Queued|Running)$", status, flags=re.M):
                return status
        if time.monotonic() > end:
            raise AssertionError(f"the queue did not drain:\n{status}")
        time.sleep(0.5)


def _alive(proc) -> bool:
    """Whether `proc` still runs: a process that ended between being listed and asked is not."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _children(proc) -> list:
    try:
        return [] if proc.status() == psutil.STATUS_ZOMBIE else proc.children()
    except psutil.NoSuchProcess:
        return []


# looped's smoke grid: the stages the fault tests kill and compare
TARGET = "render-figures-looped"
CELLS = ["standard-notebook-0", "looped-notebook-0"]
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "OMP_NUM_THREADS": "1",
       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
# what a run's records may hold that differs from run to run: how long it took, where
VOLATILE = re.compile(r"seconds|per_s|provenance|time|host|date")


def outputs(root: Path, cells=CELLS) -> dict:
    """What looped's stages wrote, as comparable values: the evaluation series and the report
    table byte for byte, the records without their timings."""
    out = {}
    for cell in cells:
        out[f"eval/{cell}"] = (root / f"plots/looped/eval/{cell}.csv").read_text()
        record = json.loads((root / f"metrics/looped/runs/{cell}.json").read_text())
        out[f"record/{cell}"] = {k: v for k, v in record.items() if not VOLATILE.search(k)}
    out["table"] = steady((root / "metrics/looped.md").read_text())
    return out


def steady(markdown: str) -> str:
    """A report's tables with their timing columns blanked."""
    lines, blank = [], set()
    for line in markdown.splitlines():
        cells = line.split("|")
        if line.startswith("| model"):
            blank = {i for i, c in enumerate(cells) if VOLATILE.search(c)}
        elif not line.startswith("|"):
            blank = set()
        lines.append("|".join("" if i in blank else c for i, c in enumerate(cells)))
    return "\n".join(lines)


class Run:
    """`dvc repro TARGET` in its own process group, its output read line by line; `env`: what
    it needs beside ENV (a cluster's SLURM_CONF)."""

    def __init__(self, cwd: Path, args=("dvc", "repro", TARGET), env: dict | None = None):
        self.proc = subprocess.Popen(list(args), cwd=cwd, env={**ENV, **(env or {})},
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        """SIGKILL to the whole process group; returns once the system has reaped every one
        of them (a killed process stays in the process table until then, where DVC's lock
        check would take it for a live one)."""
        group = [self.proc.pid]
        try:
            group += [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
        self.proc.wait()
        self.reader.join(timeout=10)
        end = time.monotonic() + 60
        while any(psutil.pid_exists(pid) for pid in group) and time.monotonic() < end:
            time.sleep(0.05)

    def wait(self) -> int:
        code = self.proc.wait(timeout=600)
        self.reader.join(timeout=10)
        return code


def leftovers(ws: Path) -> list[str]:
    """Half-written files: the temporary files of writes cut short, outside DVC's and git's own
    folders."""
    return [str(p.relative_to(ws)) for p in ws.rglob("*.tmp")
            if p.relative_to(ws).parts[0] not in (".dvc", ".git")]
