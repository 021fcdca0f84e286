"""Compare two workspaces' pipeline outputs: model weights, run records and evaluation rows
(without the fields that time or place a run), data files. Prints one line per difference and a
count per kind; exits non-zero when anything differs.

    python -m benchmarks.compare_outputs BEFORE AFTER [--tasks expr abacus looped]

Used to hold a refactoring to bit-identical results: run the same profile in a clone of each
commit, then compare.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

# fields that say when, where and how fast a run went, not what it computed
VOLATILE = {"provenance", "train_seconds", "tokens_per_s", "s_per_step", "eval_seconds",
            "samples_per_s", "steps_per_s", "timestamp", "seconds"}


def _json(path: Path):
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in VOLATILE and "seconds" not in k
                    and not k.endswith("_per_s")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    return strip(json.loads(path.read_text()))


def _state(path: Path) -> dict:
    import torch

    saved = torch.load(path, map_location="cpu", weights_only=False)
    return saved


def _same_state(a: Path, b: Path) -> bool:
    import torch

    sa, sb = _state(a), _state(b)
    if set(sa) != set(sb):
        return False
    for k in sa:
        if k == "state_dict":
            da, db = sa[k], sb[k]
            if set(da) != set(db) or not all(torch.equal(da[n], db[n]) for n in da):
                return False
        elif sa[k] != sb[k]:
            return False
    return True


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root: Path, task: str) -> list[Path]:
    out = []
    for top in ("data", "runs", "metrics", "plots"):
        d = root / top / task
        if d.is_dir():
            out += [p.relative_to(root) for p in d.rglob("*") if p.is_file()]
    return sorted(out)


def compare(before: Path, after: Path, tasks: list[str]) -> int:
    diffs = checked = 0
    for task in tasks:
        names = set(_files(before, task)) | set(_files(after, task))
        for rel in sorted(names):
            a, b = before / rel, after / rel
            if rel.suffix == ".png" or rel.name in ("metrics.json", "params.yaml") \
                    or rel.name == "checkpoint.pt":
                continue  # figures embed dates; dvclive's summary and params are copies
            checked += 1
            if not (a.is_file() and b.is_file()):
                print(f"only in {'before' if a.is_file() else 'after'}: {rel}")
                diffs += 1
                continue
            if rel.suffix == ".pt":
                same = _same_state(a, b)
            elif rel.name == ".gitignore":   # DVC adds a line as each stage ends: its order
                same = sorted(a.read_text().splitlines()) == sorted(b.read_text().splitlines())
            elif rel.suffix == ".json":
                same = _json(a) == _json(b)
            else:
                same = _digest(a) == _digest(b)
            if not same:
                print(f"differs: {rel}")
                diffs += 1
    print(f"{checked} files compared, {diffs} differ ({', '.join(tasks)})")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--tasks", nargs="+", default=["expr", "abacus", "looped"])
    args = ap.parse_args()
    sys.exit(1 if compare(args.before, args.after, args.tasks) else 0)


if __name__ == "__main__":
    main()
