"""Recording one stage in dvc.lock: DVC's own update (ruamel's round-trip loader, then its
dumper) against the stage worker's (the C loader, the same dumper for the entry that changed,
the others' text kept: arithrepro/stage_worker.py),
on a copy of a real lock file, alternating the two, best of `repeats` each, CPU seconds.

    python -m benchmarks.lock_writes path/to/dvc.lock [--repeats 5]

DVC pays this once per stage it runs, under its repository lock, on a file that grows with the
pipeline (the smoke profile's 66 stages: about 128 kB).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def _timed(modify, path: Path, round_: int) -> float:
    """What every stage's record does: read, replace the stage's entry (here the middle one's,
    a value in it changed each round), write."""
    t0 = time.process_time()
    with modify(path) as data:
        stages = data.setdefault("stages", {})
        if stages:
            name = list(stages)[len(stages) // 2]
            stages[name] = {**stages[name], "cmd": f"{stages[name].get('cmd', '')} # {round_}"}
    return time.process_time() - t0


def main() -> None:
    from dvc.utils.serialize._yaml import modify_yaml

    from arithrepro.stage_worker import lock_data

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not args.lock.is_file():
        raise SystemExit(f"error: {args.lock}: no such file")
    with tempfile.TemporaryDirectory() as tmp:
        copies = {name: Path(tmp) / name / "dvc.lock" for name in ("dvc", "worker")}
        for path in copies.values():
            path.parent.mkdir()
            shutil.copyfile(args.lock, path)
        best = {"dvc": float("inf"), "worker": float("inf")}
        for round_ in range(args.repeats):
            best["dvc"] = min(best["dvc"], _timed(modify_yaml, copies["dvc"], round_))
            best["worker"] = min(best["worker"], _timed(lock_data, copies["worker"], round_))
        same = copies["dvc"].read_bytes() == copies["worker"].read_bytes()
    size = args.lock.stat().st_size / 1024
    print(f"{args.lock} ({size:.0f} kB), best of {args.repeats}, CPU seconds per stage recorded:")
    print(f"  DVC's round trip  {best['dvc']:.3f} s")
    print(f"  the stage worker  {best['worker']:.3f} s  ({best['dvc'] / best['worker']:.1f}x "
          f"faster; the files written {'identical' if same else 'DIFFER'})")


if __name__ == "__main__":
    main()
