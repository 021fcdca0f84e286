"""Atomic file writes: a reader (or a resumed run) never sees a half-written file. And reads
that check what they got: a file damaged anyway (a full disk, a copy cut short, another
program's file in its place) stops its reader with ArtifactError, never a wrong result."""

from __future__ import annotations

import glob
import json
import os
import re
import tempfile
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any, Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


class WriteError(OSError):
    """A write the system refused (no space, no permission, a file-size limit): one line naming
    the file and the cause. The file as it was before (if any) is still there, whole."""

    def __init__(self, path: str | Path, cause: OSError):
        self.path, self.cause = Path(path), cause
        # pyarrow's refusals carry the errno in their text only
        found = re.search(r"\[errno (\d+)\]", str(cause))
        code = cause.errno or (int(found.group(1)) if found else None)
        reason = os.strerror(code) if code else one_line(cause)
        kept = "the previous file is kept" if self.path.exists() else "nothing was written"
        super().__init__(code, f"cannot write {self.path}: {reason}; {kept}")

    def __str__(self) -> str:
        return self.args[1]

    def __reduce__(self):
        return type(self), (self.path, self.cause)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it over `path` only if the block succeeds.
    A write the system refuses raises WriteError naming `path`, and `path` stays as it was."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            stale.unlink(missing_ok=True)   # a write of this file cut short (a killed process)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs read like any other file
        yield tmp
        os.replace(tmp, path)
    except WriteError:
        raise
    except OSError as err:
        raise WriteError(path, err) from err
    finally:
        if tmp is not None:
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

    # serialized in memory, then written by Python: a refused write is then an OSError with its
    # errno (torch's writer reports one as a RuntimeError without it, even into a Python file)
    buf = BytesIO()
    torch.save(obj, buf)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buf.getbuffer())


def write_frame(path: str | Path, frame) -> None:
    """Write a pandas DataFrame as CSV or Parquet, chosen by the suffix."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":   # page checksums: read_frame finds any byte changed
            frame.to_parquet(tmp, index=False, write_page_checksum=True)
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


def read_frame(path: str | Path, columns=(), text=()):
    """A pandas DataFrame from CSV, TSV (dvclive's series) or Parquet, by the suffix, that has
    at least `columns`. In a CSV or TSV, which carries no types, those columns hold numbers,
    except the ones named in `text`."""
    import pandas as pd

    path = Path(path)
    kind = {".parquet": "Parquet", ".tsv": "TSV"}.get(path.suffix, "CSV")
    try:
        frame = (_read_parquet(path) if kind == "Parquet"
                 else pd.read_csv(path, sep="\t" if kind == "TSV" else ","))
    except FileNotFoundError:
        raise
    except Exception as err:  # pyarrow and pandas raise many kinds for a damaged file
        raise ArtifactError(path, f"unreadable {kind} ({err})") from None
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise ArtifactError(path, f"no column {', '.join(missing)}")
    if kind != "Parquet":
        for column in sorted(set(columns) - set(text)):
            if not pd.api.types.is_numeric_dtype(frame[column]):
                bad = pd.to_numeric(frame[column], errors="coerce").isna()
                line = int(bad.to_numpy().argmax()) + 2   # the header is line 1
                raise ArtifactError(path, f"column {column}: {frame[column].iloc[line - 2]!r} "
                                          f"in line {line} is not a number")
    return frame


def _read_parquet(path: Path):
    """Checked before use: the pages against their checksums (write_frame writes them) and every
    value against its type (a string column's bytes are UTF-8), so that damage stops the read
    here, not a later use of a column."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, page_checksum_verification=True)
    table.validate(full=True)
    return table.to_pandas()


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
