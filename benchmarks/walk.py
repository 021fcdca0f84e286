"""The walk of one training run from its stage to its record: which parts of the project it
enters, from how many others, and how often it climbs back up into a part still waiting below
on the stack (a part that calls down, then is called again from below before it returns). A
part is a package (tasks/, train/, models/, ...) or a top-level module (runs.py, runner.py, ...).

    python -m benchmarks.walk --task looped standard-notebook-100   (in a workspace whose
                                                                     data stage has run)

Runs `arithrepro train` in this process under a profiler hook that sees every Python call. Only
what runs inside the stage's finding of its run (lookup.find, once the params are read and checked)
and the runner's training of it (runner.train) counts. A part is entered when a call goes from
one part into a function of another; a climb back up is an entry into a part that is already
on the stack beneath the caller. Each (caller's part, function called) pair counts once (the
loop repeats the same path every step), so the counts describe the path, not the steps: a task
asked four questions of a run is entered four times. A module's body run by its first import
is not counted. Each part's callers (the other parts it is entered from) are listed too: a
layer is entered from the layer above it; a part entered from many is a leaf everything uses
(the run's values, io) or a part that several layers reach into.
"""

from __future__ import annotations

import sys
from collections import Counter

PROJECT = ("arithrepro", "stages")
# where the walk is followed: the train stage finding its run (after the params are read and
# checked) and the runner training it and writing its records
WALK = {("arithrepro.lookup", "find"), ("arithrepro.runner", "train")}


def _module(frame) -> str | None:
    """The part a frame's code belongs to: arithrepro.<package> or arithrepro.<module>, stages."""
    parts = frame.f_globals.get("__name__", "").split(".")
    if parts[0] not in PROJECT:
        return None
    return ".".join(parts[:2]) if parts[0] == "arithrepro" else parts[0]


def walk(argv: list[str]) -> tuple[Counter, list[str], list[tuple]]:
    """(entries per part, the climbs back up as 'caller -> callee' lines, every entry as
    (caller's part, part, function) in the order first made) of `arithrepro train ARGV`, each
    distinct (caller's part, function called) pair counted once."""
    from arithrepro.cli import main

    entries: Counter = Counter()
    climbs: list[str] = []
    seen: dict = {}   # (caller's part, part, function) in the order first entered
    stack: list[str | None] = []

    within = []   # the walk's own frames on the stack: finding the run, training it

    def hook(frame, event, arg):
        if event == "call":
            mod = _module(frame)
            below = [m for m in stack if m]
            caller = below[-1] if below else None
            key = (caller, mod, frame.f_code.co_qualname)
            if (mod, frame.f_code.co_name) in WALK:
                within.append(len(stack))
            # a module's body running on its first import is no call of the run's path:
            # where it lands depends on which import came first
            imported = frame.f_code.co_name == "<module>"
            if within and mod and caller and mod != caller and key not in seen and not imported:
                seen[key] = None
                entries[mod] += 1
                if mod in below[:-1]:
                    climbs.append(f"{caller} -> {mod}.{frame.f_code.co_qualname}")
            stack.append(mod)
        elif event == "return" and stack:
            stack.pop()
            if within and within[-1] == len(stack):
                within.pop()

    sys.setprofile(hook)
    try:
        main(["train", *argv], standalone_mode=False)
    finally:
        sys.setprofile(None)
    return entries, climbs, list(seen)


def main() -> None:
    if not sys.argv[1:] or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    entries, climbs, order = walk(sys.argv[1:])   # `arithrepro train`'s own arguments
    print(f"{len(entries)} parts entered; those entered more than twice:")
    for mod, n in entries.most_common():
        if n > 2:
            called = ", ".join(f"{f} (from {c.split('.')[-1]})" for c, m, f in order if m == mod)
            print(f"  {n:3d}  {mod}: {called}")
    print("entered from:")
    callers: dict = {}
    for c, m, _ in order:
        callers.setdefault(m, set()).add(c)
    for mod, parts in sorted(callers.items(), key=lambda item: (-len(item[1]), item[0])):
        print(f"  {len(parts)}  {mod} <- {', '.join(sorted(parts))}")
    print(f"{len(climbs)} climbs back up:")
    for line in climbs:
        print(f"  {line}")


if __name__ == "__main__":
    main()
