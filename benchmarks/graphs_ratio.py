"""Every run shape's training step eager against the form `graphs: auto` picks, side by side,
from two `arithrepro estimate --json` files made in the same session on the same device:

    arithrepro estimate --profile paper -S graphs=false --json eager.json
    arithrepro estimate --profile paper -S graphs=auto  --json auto.json
    python -m benchmarks.graphs_ratio eager.json auto.json

Prints, per shape, ms per step in each and eager / auto (above 1: auto is faster), and the
shapes where auto is slower than eager by more than --tolerance; exit status 1 when any is.
The two files must cover the same shapes (the same profile, tasks and overrides but graphs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def steps(path: Path) -> dict[tuple[str, str], float]:
    """(task, run label) -> seconds per step, of every profile in one estimate file."""
    try:
        data = json.loads(path.read_text())
        return {(r["task"], r["label"]): float(r["timing"]["step_s"])
                for rows in data["profiles"].values() for r in rows}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"graphs_ratio: {path}: not an `arithrepro estimate --json` file ({err})")


def compare(eager: dict, auto: dict, tolerance: float) -> tuple[list[str], list[str]]:
    """The table's lines, and the shapes where auto is slower than eager beyond `tolerance`."""
    if set(eager) != set(auto):
        odd = sorted(set(eager) ^ set(auto))
        raise SystemExit(f"graphs_ratio: the files cover other shapes ({', '.join(map(' '.join, odd[:4]))})")
    lines = ["| task | run | eager ms/step | auto ms/step | eager / auto |", "|---|---|---:|---:|---:|"]
    slower = []
    for key in sorted(eager):
        ratio = eager[key] / auto[key]
        lines.append(f"| {key[0]} | {key[1]} | {1000 * eager[key]:.2f} | {1000 * auto[key]:.2f} | "
                     f"{ratio:.2f}x |")
        if ratio < 1 - tolerance:
            slower.append(f"{key[0]} {key[1]} ({ratio:.2f}x)")
    return lines, slower


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("eager", type=Path)
    parser.add_argument("auto", type=Path)
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="how much slower auto may read before it counts (noise)")
    args = parser.parse_args(argv)
    lines, slower = compare(steps(args.eager), steps(args.auto), args.tolerance)
    print("\n".join(lines))
    print(f"\nauto slower than eager by more than {args.tolerance:.0%}: "
          + (", ".join(slower) if slower else "none"))
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
