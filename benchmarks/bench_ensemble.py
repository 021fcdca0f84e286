"""E runs of one configuration trained as one Ensemble (arithrepro/ensemble.py) against the same
E runs trained one after another, in this process on this machine: the training loop's step
(fit, through the estimate command's clock) of one cell per model of every task at the params'
sizes, built as `arithrepro estimate` builds them (no data files). Both sides run the same
batches; the ratio is what training the seeds together saves (> 1) or costs (< 1)."""

from __future__ import annotations

from dataclasses import replace

import torch


def cells(params: dict) -> list:
    """(task, RunSpec at seed 0): the first run of each model (and size) of every task."""
    from arithrepro.tasks.registry import TASKS

    out, seen = [], set()
    for name, task in TASKS.items():
        for spec in task.runs(params):
            key = (name, spec.model, spec.label if task.grid else "")
            if key not in seen:
                seen.add(key)
                out.append((task, replace(spec, seed=0)))
    return out


def bench_ensemble(params: dict, copies=(3, 5), warmup: int = 2, timed: int = 4,
                   only: str = "") -> list[dict]:
    from arithrepro.ensemble import CopiesBatches, Ensemble, padding
    from arithrepro.estimate import time_steps
    from arithrepro.models.registry import MODELS
    from arithrepro.runs import Placement

    where = Placement("cpu", "fp32", False)
    print(f"\n== {' and '.join(map(str, copies))} runs of one configuration: one after another "
          f"vs together as one ensemble ({torch.get_num_threads()} threads; s per step of all "
          "runs)")
    print(f"{'cell':<28}{'E':>3}{'one by one':>12}{'together':>10}{'speed-up':>10}")
    rows = []
    for task, spec in cells(params):
        cell = f"{task.name} {spec.model}-{spec.label}"
        if only and only not in cell:
            continue
        for E in copies:
            def built(seed):
                return task.trial(replace(spec, seed=seed), params, where)

            alone = 0.0
            for seed in range(E):
                b = built(seed)
                alone += time_steps(b.net, b.batches, b.cfg, warmup, timed,
                                    MODELS[b.arch["model"]])
            bs = [built(seed) for seed in range(E)]
            model = MODELS[bs[0].arch["model"]]
            together = time_steps(Ensemble([b.net for b in bs]),
                                  CopiesBatches([b.batches for b in bs],
                                                padding(model, bs[0].arch["dims"])),
                                  bs[0].cfg, warmup, timed, model)
            rows.append({"cell": cell, "copies": E, "alone_s": alone, "together_s": together})
            print(f"{cell:<28}{E:>3}{alone:>12.3f}{together:>10.3f}{alone / together:>9.2f}x",
                  flush=True)
    return rows


if __name__ == "__main__":
    import argparse

    import yaml

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--only", default="", help="cells whose name holds this text")
    ap.add_argument("--copies", default="3,5")
    args = ap.parse_args()
    bench_ensemble(yaml.safe_load(open(args.params)),
                   tuple(int(c) for c in args.copies.split(",")), only=args.only)
