"""Stages run again in a stage worker's DVC (arithrepro/stage_worker.py), with the worker's kept
YAML reads (`patch_yaml_reads`: each text parsed once, its values handed out again as fresh
copies) and without them (every read parsed by ruamel's safe loader, as plain DVC does),
alternating round by round; CPU seconds per stage, best round of each.

    python -m benchmarks.yaml_reads STAGE [STAGE ...] [--rounds 3]

Run it in a copy of a workspace whose pipeline has run (the smoke profile's, say): it runs the
stages again (`dvc repro --single-item -f`), changing their outputs and dvc.lock as a forced
rerun does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time


def _stages(stages: list[str]) -> float:
    """CPU seconds per stage of `dvc repro --single-item -f` of each of `stages`, in turn."""
    from dvc.cli import main

    t0 = time.process_time()
    for stage in stages:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            if main(["repro", "--single-item", "-f", stage]):
                raise SystemExit(f"error: dvc repro --single-item -f {stage} failed")
    return (time.process_time() - t0) / len(stages)


def main() -> None:
    from arithrepro import stage_worker

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stages", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    stage_worker.patch_dvc()
    stage_worker.patch_lock_writes()
    modules = stage_worker.yaml_readers()
    plain = modules[0].parse_yaml
    stage_worker.patch_yaml_reads()
    kept = modules[0].parse_yaml
    _stages(args.stages[:1])   # imports and the first parses, before any round
    best = {"parsed every time": float("inf"), "kept": float("inf")}
    for _ in range(args.rounds):
        for name, parse in (("parsed every time", plain), ("kept", kept)):
            for module in modules:
                module.parse_yaml = parse
            best[name] = min(best[name], _stages(args.stages))
    print(f"{len(args.stages)} stages, best of {args.rounds} rounds, CPU seconds per stage:")
    for name, seconds in best.items():
        print(f"  YAML {name:18s} {seconds:.3f} s")
    print(f"  ({best['parsed every time'] - best['kept']:.3f} s less per stage kept)")


if __name__ == "__main__":
    main()
