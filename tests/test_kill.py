"""Kill anywhere, lose nothing: `dvc repro` of looped's stages (smoke profile), killed with
SIGKILL at points spread over every kind of stage (generation, training before and after a
checkpoint, DVC's bookkeeping of a finished stage, evaluation, the report, and at random
moments), each time re-run from where it stopped. Every re-run finishes what is left, trains no
finished cell again, leaves no half-written file, and ends with the outputs the uninterrupted run
(the session's smoke run, tests/workspace.py) wrote. A queue worker killed mid-experiment:
tests/test_two_commands.py; queued cells of the real pipeline re-queued and collected:
tests/test_queue.py."""

import json
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.workspace import (CELLS, ENV, TARGET, Run, leftovers, make_clone, outputs, ran_stages,
                             sh)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

def started(prefix: str, after: float = 0.0):
    """Kill `after` seconds once the run has started a stage whose name starts with `prefix`."""
    def ready(run: Run, ws: Path, clock: dict) -> bool:
        if f"Running stage '{prefix}" in run.text or f"] start {prefix}" in run.text:
            clock.setdefault(prefix, time.monotonic())
            return time.monotonic() - clock[prefix] >= after
        return False
    return ready


def appears(pattern: str):
    """Kill as soon as a file matching `pattern` is written that was not there, as it is, when
    the run started (a checkpoint, new or rewritten by a resumed run; a stage's output that DVC
    has yet to record)."""
    def stamps(ws: Path) -> dict[Path, int]:
        found = {}
        for path in ws.glob(pattern):
            try:
                found[path] = path.stat().st_mtime_ns
            except FileNotFoundError:   # replaced between the glob and the stat
                pass
        return found

    def ready(run: Run, ws: Path, clock: dict) -> bool:
        before = clock.setdefault(pattern, stamps(ws))
        return any(before.get(path) != stamp for path, stamp in stamps(ws).items())
    return ready


def at_random(seconds: float):
    return lambda run, ws, clock: time.monotonic() - clock["start"] >= seconds


_rng = random.Random(0)
# In the order the pipeline reaches them: each kill hits the re-run that followed the last one.
# A point the run ends before leaves nothing for the points after it, so each point is one the
# re-run is sure to reach: every kind the test asserts comes before any point that might not be
# reached (a resumed cell may finish without writing a checkpoint; a random moment may come after
# the report), and those come last.
POINTS = [
    ("generation", started("generate-looped", 0.3)),
    ("a random moment", at_random(_rng.uniform(0.5, 2.5))),
    ("training, before its first checkpoint", started("train-looped@", 0.2)),
    ("training, after a checkpoint", appears("runs/looped/*/checkpoint.pt")),
    ("DVC recording a trained cell", appears("runs/looped/*/model.pt")),
    ("evaluation", started("evaluate-looped@", 0.5)),
    ("DVC recording an evaluation", appears("plots/looped/eval/*.csv")),
    ("the report", started(TARGET, 0.5)),
    ("a random moment", at_random(_rng.uniform(0.5, 2.5))),
]
STAGES = {"code-deps", "generate-looped", TARGET,
          *(f"{kind}-looped@{c}" for kind in ("train", "evaluate") for c in CELLS)}


# DVC rewrites .dvc/tmp/rwlock and dvc.lock in place: a DVC process killed while writing one
# leaves it cut short, and DVC's commands stop on it until `arithrepro repro` (or a hand) repairs
# it
CUT_SHORT = re.compile(r"Unable to read RWLock-file|dvc\.lock' validation failed|"
                       r"unable to read: '[^']*dvc\.lock'")
COMMANDS = [("dvc", "repro", TARGET), ("arithrepro", "repro", "--jobs", "2", TARGET)]


def finished(ws: Path) -> set[str] | None:
    """The stages of TARGET's graph whose outputs DVC has recorded and finds unchanged (None
    while DVC cannot say: its rwlock file or dvc.lock cut short)."""
    # stdout only: DVC says on stderr that it cleared a killed process's locks
    proc = subprocess.run(["dvc", "status", "--json", "--with-deps", TARGET], cwd=ws, env=ENV,
                          capture_output=True, text=True)
    if proc.returncode and CUT_SHORT.search(proc.stderr):
        return None
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    changed = set(json.loads(proc.stdout or "{}"))
    return STAGES - changed


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    ws = make_clone(tmp_path_factory.mktemp("kill") / "pristine")
    sh(["arithrepro", "compose-params", "-S", "profile=smoke"], ws)
    return ws


def test_killed_anywhere_a_re_run_finishes_and_loses_nothing(pristine, smoke_first_run,
                                                             tmp_path):
    """The runs take turns: `dvc repro`, then `arithrepro repro` (README command 1's), each
    killed at the next point; the last one runs to the end."""
    ws = tmp_path / "ws"
    shutil.copytree(pristine, ws, symlinks=True)
    kills, retrained, refused, done = [], [], [], set()
    points = [*POINTS, ("none: the last run", None)]
    k = 0
    while k < len(points):
        label, ready = points[k]
        done = now if (now := finished(ws)) is not None else done
        # after a refusal the same point is tried again with `arithrepro repro`, which clears
        # the cut-short lock, so that every point is still hit
        again = bool(refused) and refused[-1] == (k, label)
        command = COMMANDS[k % 2] if ready is not None and not again else COMMANDS[1]
        k += 1
        run = Run(ws, command)
        if ready is None:
            assert run.wait() == 0, run.text[-3000:]
        else:
            clock = {"start": time.monotonic()}
            while run.proc.poll() is None and not ready(run, ws, clock):
                time.sleep(0.005)
            if run.proc.poll() is not None:   # it ended before this point came
                if command == COMMANDS[0] and run.wait() and CUT_SHORT.search(run.text):
                    # DVC's, left by the last kill
                    refused.append((k - 1, label))
                    k -= 1
                    continue
                assert run.wait() == 0, run.text[-3000:]
                kills.append(f"{label}: none, the run had ended")
                continue
            run.kill()
            kills.append(f"{label} ({command[0]})")
        # no stage DVC had recorded as done ran again
        retrained += [(label, stage) for stage in ran_stages(run.text) & done]
    same = outputs(ws) == outputs(smoke_first_run.saved)
    lost = len(retrained) + (0 if same else 1)
    injected = [k for k in kills if ": none" not in k]
    print(f"\nkills injected: {len(injected)}, recovered: {len(injected) if not lost else 0}, "
          f"lost: {lost}; dvc repro refused on a cut-short rwlock: {len(refused)}",
          *kills, sep="\n  ")
    assert not retrained, retrained
    assert not leftovers(ws), leftovers(ws)
    assert finished(ws) == STAGES and "Running stage" not in sh(["dvc", "repro", TARGET], ws)
    assert same, {k: v for k, v in outputs(ws).items() if outputs(smoke_first_run.saved)[k] != v}
    # every kind of stage was hit, whatever the order DVC runs the cells in
    hit = {k.rsplit(" (", 1)[0] for k in injected}
    assert {"generation", "training, before its first checkpoint", "training, after a checkpoint",
            "DVC recording a trained cell", "evaluation", "the report"} <= hit, kills
