"""E runs of one configuration trained as one Ensemble (arithrepro/stacking.py) against the same
E runs trained one after another, in this process on this machine: the training loop's step
(fit, through the estimate command's clock) of one cell per model of every task at the params'
sizes, built as `arithrepro estimate` builds them (no data files). Both sides run the same
batches; the ratio is what training the seeds together saves (> 1) or costs (< 1)."""

from __future__ import annotations

from dataclasses import replace

import torch


def cells(params: dict, only: str = "") -> list:
    """(task, Run at seed 0, its name): the first run of each model (and size) of every
    task, those whose name holds `only`."""
    from arithrepro.tasks.registry import TASKS

    out, seen = [], set()
    for name, task in TASKS.items():
        for run in task.runs(params):
            key = (name, run.model, run.label if task.grid else "")
            cell = f"{name} {run.model}-{run.label}"
            if key not in seen and only in cell:
                seen.add(key)
                out.append((task, replace(run, seed=0), cell))
    return out


def bench_ensemble(params: dict, copies=(3, 5), warmup: int = 2, timed: int = 4,
                   only: str = "") -> list[dict]:
    from arithrepro.config import resolve_graphs
    from arithrepro.stacking import stacked
    from arithrepro.estimate import time_steps
    from arithrepro.models.registry import spec_of
    from arithrepro.device import resolve_device
    from arithrepro.runner import build
    from arithrepro.runs import Placement

    device = resolve_device(params["device"])
    # on a GPU, each step a CUDA graph where the params ask for it
    where = Placement(device, "fp32", False,
                      resolve_graphs(params.get("graphs", False), device, "fp32"))
    on = f"{torch.get_num_threads()} threads" if device == "cpu" else device
    print(f"\n== {' and '.join(map(str, copies))} runs of one configuration: one after another "
          f"vs together as one ensemble ({on}; s per step of all runs)")
    print(f"{'cell':<28}{'E':>3}{'one by one':>12}{'together':>10}{'speed-up':>10}")
    rows = []
    for task, run, cell in cells(params, only):
        for E in copies:
            def built(seed):
                return build(task, replace(run, seed=seed), params, where, trial=True)

            alone = 0.0
            for seed in range(E):
                b = built(seed)
                alone += time_steps(b.net, b.data.batches, b.cfg, warmup, timed,
                                    spec_of(b.arch))
            bs = [built(seed) for seed in range(E)]
            together = time_steps(*stacked(bs), bs[0].cfg, warmup, timed, spec_of(bs[0].arch))
            rows.append({"cell": cell, "copies": E, "alone_s": alone, "together_s": together})
            print(f"{cell:<28}{E:>3}{alone:>12.3f}{together:>10.3f}{alone / together:>9.2f}x",
                  flush=True)
    return rows


def _one_process(task_name, run, params, threads, barrier, warmup, timed, out, device="cpu"):
    """A child of bench_processes: one run at `threads` threads on `device`, timed after the
    barrier."""
    from arithrepro.estimate import time_steps
    from arithrepro.models.registry import spec_of
    from arithrepro.runner import build
    from arithrepro.runs import Placement
    from arithrepro.tasks.registry import TASKS

    torch.set_num_threads(threads)
    b = build(TASKS[task_name], run, params, Placement(device, "fp32", False), trial=True)
    barrier.wait()
    out.put(time_steps(b.net, b.data.batches, b.cfg, warmup, timed, spec_of(b.arch)))


def bench_processes(params: dict, processes: int = 2, warmup: int = 2, timed: int = 4,
                    only: str = "") -> list[dict]:
    """`processes` runs as that many processes sharing the cores (threads split evenly, all
    stepping at once) against the same runs one after another with every thread: what a
    scheduler that runs cells side by side would save (> 1) or cost (< 1). Where the params'
    device is a GPU, the processes share that one GPU, each with one CPU thread: what running
    several stages per GPU saves where one small model leaves it waiting on launches."""
    import multiprocessing as mp

    from arithrepro.device import resolve_device

    device = resolve_device(params["device"])
    threads = torch.get_num_threads() if device == "cpu" else processes
    if threads % processes:
        raise SystemExit(f"--processes {processes}: must divide the {threads} threads")
    ctx = mp.get_context("spawn")
    on = "" if device == "cpu" else f", sharing {device}"
    print(f"\n== {processes} runs one after another at {threads} threads vs {processes} "
          f"processes at {threads // processes} each{on} (s per step of all runs)")
    print(f"{'cell':<28}{'P':>3}{'one by one':>12}{'side by side':>14}{'speed-up':>10}")
    rows = []
    for task, run, cell in cells(params, only):
        seeds = [replace(run, seed=s) for s in range(processes)]

        def measure(n_threads, group):
            barrier, out = ctx.Barrier(len(group)), ctx.Queue()
            procs = [ctx.Process(target=_one_process, args=(task.name, s, params, n_threads,
                                                            barrier, warmup, timed, out, device))
                     for s in group]
            for p in procs:
                p.start()
            times = [out.get() for _ in procs]
            for p in procs:
                p.join()
            return times

        alone = sum(measure(threads, [s])[0] for s in seeds)
        # side by side, the slowest run decides when all are done
        together = max(measure(threads // processes, seeds))
        rows.append({"cell": cell, "processes": processes, "alone_s": alone,
                     "together_s": together})
        print(f"{cell:<28}{processes:>3}{alone:>12.3f}{together:>14.3f}"
              f"{alone / together:>9.2f}x", flush=True)
    return rows


if __name__ == "__main__":
    import argparse

    import yaml

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--only", default="", help="cells whose name holds this text")
    ap.add_argument("--copies", default="3,5")
    ap.add_argument("--processes", type=int, default=0,
                    help="instead: this many runs as processes side by side vs one by one")
    args = ap.parse_args()
    if args.processes:
        bench_processes(yaml.safe_load(open(args.params)), args.processes, only=args.only)
        raise SystemExit
    bench_ensemble(yaml.safe_load(open(args.params)),
                   tuple(int(c) for c in args.copies.split(",")), only=args.only)
