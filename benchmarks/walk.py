"""The walk of one training run from its stage to its record: which parts of the project it
enters, from how many others, and how often it climbs back up into a part still waiting below
on the stack (a part that calls down, then is called again from below before it returns). A
part is a package (tasks/, train/, models/, ...) or a top-level module (runs.py, runner.py, ...).

    python -m benchmarks.walk --task looped standard-notebook-0     (in a workspace whose
                                                                     data stage has run)

Runs `arithrepro train` in this process under a profiler hook that sees every Python call. A
part is entered when a call goes from one part into another; a climb back up is an entry into a
part that is already on the stack beneath the caller. Each (caller, callee) pair counts once
(the loop repeats the same path every step), so the counts describe the path, not the steps.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

PROJECT = ("arithrepro", "stages")


def _module(frame) -> str | None:
    """The part a frame's code belongs to: arithrepro.<package> or arithrepro.<module>, stages."""
    parts = frame.f_globals.get("__name__", "").split(".")
    if parts[0] not in PROJECT:
        return None
    return ".".join(parts[:2]) if parts[0] == "arithrepro" else parts[0]


def walk(argv: list[str]) -> tuple[Counter, list[str]]:
    """(entries per part, the climbs back up as 'caller -> callee' lines) of `arithrepro train
    ARGV`, each distinct (caller, callee) pair counted once."""
    from arithrepro.cli import main

    entries: Counter = Counter()
    climbs: list[str] = []
    seen: set = set()
    stack: list[str | None] = []

    def hook(frame, event, arg):
        if event == "call":
            mod = _module(frame)
            below = [m for m in stack if m]
            caller = below[-1] if below else None
            if mod and caller and mod != caller and (caller, mod) not in seen:
                seen.add((caller, mod))
                entries[mod] += 1
                if mod in below[:-1]:
                    climbs.append(f"{caller} -> {mod}")
            stack.append(mod)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(hook)
    try:
        main(["train", *argv], standalone_mode=False)
    finally:
        sys.setprofile(None)
    return entries, climbs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("args", nargs=argparse.REMAINDER, help="arguments of `arithrepro train`")
    args = ap.parse_args()
    entries, climbs = walk(args.args)
    print(f"{len(entries)} parts entered; from more than two others:")
    for mod, n in entries.most_common():
        if n > 2:
            print(f"  {n:3d}  {mod}")
    print(f"{len(climbs)} climbs back up:")
    for line in climbs:
        print(f"  {line}")


if __name__ == "__main__":
    main()
