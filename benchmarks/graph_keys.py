"""How many CUDA graphs a run's static step (arithrepro/train/graphs.py) captures, and when.

The static step captures one graph per key: the batch's shape after padding, and what the step
draws on the host (a progressive loss's exit depth, a looped encoder's loop count). A capture
costs a few eager steps (two warm-up passes, then the captured one); a replay costs far less
than one. Where keys keep appearing, the captures are the step's time: an estimate that times
five steps after three, or a short run, pays a capture on most of them. This walks a run's
batches and the step's host draws on the CPU, training nothing, and prints per run shape the
distinct keys after N steps and the steps at which new ones still appear.

    python -m benchmarks.graph_keys --profile paper --task looped --task abacus --steps 20000
"""

from __future__ import annotations

import argparse
import math

import torch

from arithrepro.estimate import graph_keys


def main(argv: list[str] | None = None) -> int:
    from arithrepro import config
    from arithrepro.projection import shapes

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="paper")
    ap.add_argument("-S", "--set", dest="overrides", action="append", default=[])
    ap.add_argument("--task", dest="tasks", action="append", default=[])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--only", default="", help="run shapes whose label holds this text")
    args = ap.parse_args(argv)
    params = config.compose([f"profile={args.profile}", "device=cpu", *args.overrides], "conf")
    print(f"| task | run | steps walked | keys | new keys in the last half | last new key at step |")
    print("|---|---|---:|---:|---:|---:|")
    torch.manual_seed(0)
    for shape in shapes(params, args.tasks or ["looped", "abacus"]):
        if args.only not in shape.label or shape.config.home:
            continue
        built = shape.build()
        walked = min(args.steps, built.data.batches.steps)
        first = graph_keys(built.net, built.cfg, built.data.batches, walked)
        late = sum(1 for s in first if s >= walked // 2)
        print(f"| {shape.task} | {shape.label} | {walked:,} | {len(first)} | {late} | "
              f"{first[-1] if first else math.nan:,} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
