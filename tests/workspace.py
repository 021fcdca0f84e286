"""A clone of this checkout to run DVC in, and the shell the pipeline tests run commands with."""

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sh(args, cwd, check=True, **extra_env):
    """Run a command in `cwd` with this interpreter's scripts first on PATH and a git identity;
    its stdout and stderr, or AssertionError with their tails if it failed."""
    env = {**os.environ, **extra_env, "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@localhost",
           "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@localhost"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode:
        raise AssertionError(f"{' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


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
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "queue-worker" in cmd and str(path) in (proc.info["cwd"] or "") + cmd:
            found += [proc, *proc.children(recursive=True)]
    return found
