"""What a DVC process killed mid-write leaves in a workspace: dvc.lock cut short, repaired to
its whole entries, and partial copies of outputs, removed."""

from __future__ import annotations

import re
from pathlib import Path

# dvc_objects' temporary name (tmp_fname: "<prefix>.<22 random characters>.tmp"): an output
# being linked or copied in or out of the cache
DVC_PARTIAL = re.compile(r".*\.[A-Za-z0-9_-]{22}\.tmp")


def remove_partial_copies(root: Path, outs, echo=print) -> list[Path]:
    """DVC copies or links an output between the workspace and its cache under a temporary name
    beside it, then renames it; a DVC process killed in between leaves that file, and no DVC
    command removes it. `outs`: the pipeline's output paths (a folder output searched through).
    Called with no DVC process left in the workspace. Returns what it removed."""
    outs = [Path(out) for out in outs]
    found = {p for folder in {out.parent for out in outs} if folder.is_dir()
             for p in folder.glob("*.tmp")}
    found |= {p for out in outs if out.is_dir() for p in out.rglob("*.tmp")}
    removed = sorted(p for p in found if DVC_PARTIAL.fullmatch(p.name) and p.is_file())
    for path in removed:
        path.unlink(missing_ok=True)
    if removed:
        names = ", ".join(str(p.relative_to(root)) if p.is_relative_to(root) else str(p)
                          for p in removed)
        echo(f"removed what a killed DVC process left half-copied: {names}")
    return removed


def repair_lockfile(root: Path, echo=print) -> None:
    """DVC rewrites dvc.lock in place, so a DVC process killed while writing it leaves it cut
    short, and every later DVC command in the workspace stops on it. Called with no DVC process
    left in the workspace: the whole entries are kept and the cut one is dropped, so its stage
    runs again (or comes back from the run cache); a file with no whole entry is removed."""
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
