"""Several expr cells trained at once on one machine's cores: one after another with every core,
side by side each pinned to its share of the cores (`taskset`; torch sizes its thread pool to
the cores a process may use), and side by side unpinned (every process on every core).

    python -m benchmarks.side_by_side [--cells lstm-small,gpt-small] [--steps 20] [--batch 256]

Prints the wall time of each arrangement for the same work, and the slowest cell's s/step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.against import workspace


def train(ws: Path, cell: str, cores: list[int] | None) -> subprocess.Popen:
    model, size = cell.split("-")
    exe = str(Path(".").resolve() / ".venv" / "bin" / "arithrepro")
    cmd = [exe, "train", "--task", "expr", f"{cell}-0"]
    if cores is not None:
        cmd = ["taskset", "-c", ",".join(map(str, cores)), *cmd]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    return subprocess.Popen(cmd, cwd=ws, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def arrangement(spaces: dict, cells: list[str], how: str) -> tuple[float, float]:
    """(wall seconds, the slowest cell's s/step) for the cells run `how`."""
    cores = sorted(os.sched_getaffinity(0))
    t0 = time.perf_counter()
    if how == "one after another":
        for cell in cells:
            train(spaces[cell], cell, None).wait()
    else:
        share = max(1, len(cores) // len(cells))
        procs = [train(spaces[cell], cell, cores[i * share:(i + 1) * share]
                       if how == "side by side, pinned" else None)
                 for i, cell in enumerate(cells)]
        for p in procs:
            p.wait()
    wall = time.perf_counter() - t0
    worst = 0.0
    for cell in cells:
        rec = json.loads((spaces[cell] / "runs" / "expr" / f"{cell}-0" / "train.json").read_text())
        worst = max(worst, rec["train_seconds"] / rec["steps"])
        shutil.rmtree(spaces[cell] / "runs")
    return wall, worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default="lstm-small,gpt-small")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    cells = args.cells.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        spaces = {}
        for cell in cells:
            spaces[cell] = workspace(Path("."), Path(tmp) / cell, args.steps, args.batch)
            subprocess.run([str(Path(".venv/bin/arithrepro").resolve()), "generate-datasets",
                            "--task", "expr"], cwd=spaces[cell], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        n = len(os.sched_getaffinity(0))
        print(f"{len(cells)} cells ({', '.join(cells)}), {args.steps} steps of {args.batch}, "
              f"on {n} cores: wall time of the whole (process start and data loading included) "
              f"and the slowest cell's training s/step")
        print("| arrangement | wall s | slowest s/step |\n|---|---:|---:|")
        for how in ("one after another", "side by side, pinned", "side by side, unpinned"):
            wall, worst = arrangement(spaces, cells, how)
            print(f"| {how} | {wall:.1f} | {worst:.3f} |", flush=True)


if __name__ == "__main__":
    main()
