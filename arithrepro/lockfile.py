"""dvc.lock cut short by a DVC process killed while writing it, repaired to its whole entries."""

from __future__ import annotations

from pathlib import Path


def repair_lockfile(root: Path, echo=print) -> None:
    """DVC rewrites dvc.lock in place, so a DVC process killed while writing it leaves it cut
    short, and every later DVC command in the workspace stops on it. Called with no DVC process
    left in the workspace: the whole entries are kept and the cut one is dropped, so its stage
    runs again (or comes back from the run cache); a file with no whole entry is removed."""
    import re

    import yaml
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA

    from arithrepro.io import write_text

    path = root / "dvc.lock"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return

    def valid(candidate: str) -> bool:
        try:
            COMPILED_LOCKFILE_SCHEMA(yaml.safe_load(candidate))
            return True
        except Exception:   # a YAML error, or DVC's schema refusing it
            return False

    if valid(text):
        return
    starts = [m.start() for m in re.finditer(r"^  \S", text, flags=re.M)]   # a stage's entry
    for kept in range(len(starts) - 1, 0, -1):
        if valid(text[:starts[kept]]):
            write_text(path, text[:starts[kept]])
            echo(f"dvc.lock: cut short by a DVC process killed while writing it; kept its "
                 f"whole entries ({kept}), dropped the cut one (its stage runs again or comes "
                 "back from the run cache)")
            return
    path.unlink()
    echo("dvc.lock: cut short by a DVC process killed while writing it, with no whole entry; "
         "removed (the stages come back from the run cache or run again)")
