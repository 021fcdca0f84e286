"""Where a command's CPU time goes, process by process: every Python process it starts (the test
suite's DVC commands, the stages they run, their training processes) reports at exit its CPU
seconds, its command, the test that started it and whether it imported torch and torch._dynamo.

    python -m benchmarks.processes                      # the suite as `make test` runs it
    python -m benchmarks.processes -- dvc repro         # any other command

A `sitecustomize` module on PYTHONPATH does the reporting, so the command and everything it
starts run unchanged (a process killed with SIGKILL reports nothing; non-Python processes, git
and the SLURM daemons, are not counted). Prints the command's own CPU time beside the processes'
sum, then the processes by command (the program and its first argument) and by test file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

SUITE = ["pytest", "-q", "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]

# runs in every Python process the command starts; reports once, at exit
HOOK = '''
import atexit, json, os, resource, sys
def _report():
    try:
        use = resource.getrusage(resource.RUSAGE_SELF)
        with open(os.environ["ARITHREPRO_PROCESS_LOG"], "a") as log:
            log.write(json.dumps({"argv": sys.argv[:3], "cpu": use.ru_utime + use.ru_stime,
                                  "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
                                  "torch": "torch" in sys.modules,
                                  "dynamo": "torch._dynamo" in sys.modules}) + "\\n")
    except Exception:
        pass
atexit.register(_report)
'''


def command_of(argv: list[str]) -> str:
    """The program and its first argument: `dvc exp`, `arithrepro train`, `stage_worker.py 5`."""
    words = [Path(argv[0]).name if argv else "?", *argv[1:2]]
    return " ".join(words)


def table(rows: list[dict], key, top: int) -> list[str]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    ordered = sorted(groups.items(), key=lambda kv: -sum(r["cpu"] for r in kv[1]))
    lines = [f"{'cpu s':>8} {'procs':>6} {'torch':>6} {'dynamo':>7}  what"]
    for name, group in ordered[:top]:
        lines.append(f"{sum(r['cpu'] for r in group):8.1f} {len(group):6d} "
                     f"{sum(r['torch'] for r in group):6d} {sum(r['dynamo'] for r in group):7d}  {name}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="rows per table")
    parser.add_argument("command", nargs="*", help="the command (default: the test suite)")
    args = parser.parse_args(argv)
    command = args.command or SUITE
    with tempfile.TemporaryDirectory() as hook:
        (Path(hook) / "sitecustomize.py").write_text(HOOK)
        log = Path(hook) / "processes.jsonl"
        env = {**os.environ, "ARITHREPRO_PROCESS_LOG": str(log), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [hook, os.environ.get("PYTHONPATH")])),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        code = subprocess.run(command, env=env).returncode
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    total = sum(r["cpu"] for r in rows)
    print(f"\n{' '.join(command)}: exit {code}; CPU {children.ru_utime + children.ru_stime:.0f} s "
          f"in all, {total:.0f} s in {len(rows)} Python processes that reported "
          f"({sum(r['torch'] for r in rows)} imported torch, "
          f"{sum(r['dynamo'] for r in rows)} torch._dynamo)")
    print("\nby command:")
    print("\n".join(table(rows, lambda r: command_of(r["argv"]), args.top)))
    print("\nby test file (the test that started the process; none: the suite's own workers, "
          "or a process started outside a test):")
    print("\n".join(table(rows, lambda r: r["test"].split("::")[0] or "none", args.top)))
    return code


if __name__ == "__main__":
    sys.exit(main())
