"""A checkout's files elsewhere, and commands run in another folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

IDENTITY = {"GIT_AUTHOR_NAME": "arithrepro", "GIT_AUTHOR_EMAIL": "arithrepro@localhost",
            "GIT_COMMITTER_NAME": "arithrepro", "GIT_COMMITTER_EMAIL": "arithrepro@localhost"}


def copy_checkout(root: Path, dest: Path, message: str = "copy") -> Path:
    """The files of the git checkout at `root` that git tracks or would (tracked, and untracked
    but not ignored: no outputs), as they are in its working tree, committed in a fresh
    repository at `dest`."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=root, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = Path(root) / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    env = {**IDENTITY, **os.environ}   # the caller's identity first, when it has one
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", message]):
        subprocess.run(argv, cwd=dest, check=True, capture_output=True, env=env)
    return dest


@contextlib.contextmanager
def working_dir(path):
    """The process's working directory is `path` meanwhile."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)
