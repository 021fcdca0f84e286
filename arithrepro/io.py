"""Atomic file writes: a reader (or a resumed run) never sees a half-written file. And reads
that check what they got: a file damaged anyway (a full disk, a copy cut short, another
program's file in its place) stops its reader with ArtifactError, never a wrong result."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it over `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs should read like any other file
    tmp = Path(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def copy_file(src: str | Path, dst: str | Path) -> None:
    import shutil

    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def save_torch(path: str | Path, obj: Any) -> None:
    import torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def write_frame(path: str | Path, frame) -> None:
    """Write a pandas DataFrame as CSV or Parquet, chosen by the suffix."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)


# --- reading what the pipeline wrote ---------------------------------------------------------

class ArtifactError(ValueError):
    """A file the pipeline wrote that cannot be used: unreadable, cut short, or not what its
    reader expects. `rebuild` is the command that writes it again; readers that do not know it
    leave it to the stages, which derive it from the file layout."""

    def __init__(self, path: str | Path, problem: str, rebuild: str | None = None):
        self.path, self.problem, self.rebuild = Path(path), one_line(problem), rebuild
        super().__init__(str(self))

    def __str__(self) -> str:
        tail = f"; rebuild it with `{self.rebuild}`" if self.rebuild else ""
        return f"{self.path}: {self.problem}{tail}"

    def __reduce__(self):
        return type(self), (self.path, self.problem, self.rebuild)


def one_line(text: str, limit: int = 240) -> str:
    """Library errors (torch's, pandas') span lines; a stage reports on one."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def read_json(path: str | Path, keys: tuple[str, ...] | None = None) -> Any:
    """The JSON value in `path`; with `keys`, a JSON object holding at least those keys."""
    try:
        obj = json.loads(Path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ArtifactError(path, f"not valid JSON ({err})") from None
    if keys is not None:
        if not isinstance(obj, dict):
            raise ArtifactError(path, f"expected a JSON object, found {type(obj).__name__}")
        missing = [k for k in keys if k not in obj]
        if missing:
            raise ArtifactError(path, f"no key {', '.join(missing)}")
    return obj


def read_frame(path: str | Path, columns=()):
    """A pandas DataFrame from CSV, TSV (dvclive's series) or Parquet, by the suffix, that has
    at least `columns`."""
    import pandas as pd

    path = Path(path)
    kind = {".parquet": "Parquet", ".tsv": "TSV"}.get(path.suffix, "CSV")
    try:
        frame = (pd.read_parquet(path) if kind == "Parquet"
                 else pd.read_csv(path, sep="\t" if kind == "TSV" else ","))
    except FileNotFoundError:
        raise
    except Exception as err:  # pyarrow and pandas raise many kinds for a damaged file
        raise ArtifactError(path, f"unreadable {kind} ({err})") from None
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise ArtifactError(path, f"no column {', '.join(missing)}")
    return frame


def set_aside(path: str | Path, label: str) -> Path:
    """Rename `path` to `<path>.<label>` (then .1, .2, ... if taken) and return the new name:
    a damaged file is kept for a look, out of the way of the run that replaces it."""
    path = Path(path)
    dest = path.with_name(f"{path.name}.{label}")
    n = 0
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.{label}.{n}")
    os.replace(path, dest)
    return dest
