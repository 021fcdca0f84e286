"""The processes `arithrepro repro` runs stages in, and the DVC processes it must not run beside:
a stage worker (arithrepro/stage_worker.py) or a job's commands one after another, each on
cores of its own; the live DVC commands a workspace's path locks name."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from arithrepro.schedule import Job


class Worker:
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

    def submit(self, job: Job, log: Path | None) -> "Worker":
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


class Chain:
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


def dvc_holders(root: Path, echo=print) -> list[tuple[int, str]]:
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
