"""A clone of this checkout to run DVC in, and the shell the pipeline tests run commands with."""

import os
import re
import shutil
import subprocess
import sys
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
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    sh(["git", "init", "-q"], dest)
    sh(["git", "add", "-A"], dest)
    sh(["git", "commit", "-qm", "clone"], dest)
    return dest


def ran_stages(out: str) -> set[str]:
    """The stages a `dvc repro` / `dvc exp run` output says it ran, or an `arithrepro repro`
    with several jobs says it started (its lines `[k/n] start <stage>`)."""
    return ({line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")}
            | set(re.findall(r"^\[\d+/\d+\] start (\S+)", out, flags=re.M)))
