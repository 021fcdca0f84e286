"""A params' runs projected on this machine: each run shape (a configuration's runs that differ
in their seed only) built on data made in memory, a few of its steps timed through the one
training loop (arithrepro/estimate.py), and every run of the shape projected from them. What
`arithrepro estimate` prints for a profile and `arithrepro repro` projects for the runs it
would train."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterator

from arithrepro.device import resolve_device, resolve_precision
from arithrepro.estimate import Projection, Timing, time_steps, validations


@dataclass
class Shape:
    """A configuration's runs (those `keep` kept): `make(run)` -> that run (runs.Built) on data
    made in memory; `build()` the first of them."""
    config: object      # runs.Config (the first, where configurations train together)
    runs: list          # runs.Run
    make: Callable
    configs: int = 1    # the configurations whose runs it holds

    task = property(lambda self: self.config.task)

    def build(self):
        return self.make(self.runs[0])

    @property
    def label(self) -> str:
        more = f" (+{self.configs - 1} trained with it)" if self.configs > 1 else ""
        return self.config.name + (" (bench)" if self.config.home else "") + more


def as_ensembles(shapes: Iterator[Shape]) -> list[Shape]:
    """The shapes whose runs train as one ensemble (runs.Config.ensemble_key) as one shape each."""
    groups: dict[str, list[Shape]] = {}
    for shape in shapes:
        groups.setdefault(shape.config.ensemble_key, []).append(shape)
    return [Shape(g[0].config, [r for sh in g for r in sh.runs], g[0].make, len(g))
            for g in groups.values()]


def placement(params: dict) -> tuple[str, dict[str, str]]:
    """(the device, {task: precision}) the params train with on this machine."""
    from arithrepro.tasks.registry import TASKS

    device = resolve_device(params["device"])
    return device, {t: resolve_precision(params["precision"], device, task.precision)
                    for t, task in TASKS.items()}


def shapes(params: dict, tasks, keep: Callable = lambda run: True) -> Iterator[Shape]:
    """Every run shape of `tasks` in the params, the benchmark's runs included, of the runs
    `keep` keeps."""
    from arithrepro import bench
    from arithrepro.runner import build
    from arithrepro.runs import Placement
    from arithrepro.config import resolve_graphs
    from arithrepro.tasks.registry import TASKS

    device, precisions = placement(params)
    for name in tasks:
        task = TASKS[name]
        where = Placement(device, precisions[name], params["compile"],
                          resolve_graphs(params["graphs"], device, precisions[name]))
        for config in bench.trained(task, params):
            runs = [run for run in config.runs if keep(run)]
            if runs:
                yield Shape(config, runs, lambda run, task=task, where=where:
                            build(task, run, params, where, trial=True))


def project(params: dict, tasks, warmup: int, steps: int, keep: Callable = lambda run: True,
            timings: dict | None = None, echo: Callable = lambda line: None,
            stop_after_s: float | None = None, ensemble: bool = False,
            min_steps: int = 0) -> list[tuple[Projection, list]]:
    """(projection, its runs) for every shape of the runs `keep` keeps; `timings` (shape key ->
    Timing) shared across calls times each shape once. With `stop_after_s`, stops once the
    projections add up to more than that many seconds (enough to know a budget is exceeded).
    With `min_steps`, a shape whose runs take fewer steps is built but neither timed nor
    projected (no row).
    With `ensemble`, a shape's runs train as one ensemble, as `arithrepro repro` trains a
    configuration's pending seeds on a GPU (with those of the configurations it trains with:
    `as_ensembles`): its step is timed with every run as a member."""
    from arithrepro.models.registry import spec_of

    device = resolve_device(params["device"])
    timings = {} if timings is None else timings
    out, total = [], 0.0
    found = shapes(params, tasks, keep)
    for shape in as_ensembles(found) if ensemble else found:
        built = shape.build()
        if built.data.batches.steps < min_steps:
            continue
        members = len(shape.runs) if ensemble else 1
        key = _shape_key(shape.task, built, params["compile"]) + f" x{members}"
        if key not in timings:
            echo(f"timing {shape.task} {shape.label}"
                 + (f" as an ensemble of {members}" if members > 1 else ""))
            timer = _validation(built, device)
            step_s = (time_steps(built.net, built.data.batches, built.cfg, warmup, steps,
                                 spec_of(built.arch)) if members == 1
                      else _ensemble_step(shape, built, warmup, steps))
            timings[key] = Timing(step_s, timer(built.net))
        row = Projection(shape.task, shape.label, len(shape.runs), built.data.batches.steps,
                         validations(built.data.batches, built.cfg), timings[key], members)
        del built
        out.append((row, shape.runs))
        total += row.total_s
        if stop_after_s is not None and total > stop_after_s:
            break
    return out


def _ensemble_step(shape: Shape, first, warmup: int, steps: int) -> float:
    """Seconds per step of the shape's runs trained as one ensemble, as runner.train builds it."""
    from arithrepro.models.registry import spec_of
    from arithrepro.stacking import stacked

    builts = [first, *(shape.make(run) for run in shape.runs[1:])]
    net, batches = stacked(builts)
    return time_steps(net, batches, first.cfg, warmup, steps, spec_of(first.arch))


def _shape_key(task: str, built, compile_) -> str:
    """What a step's time depends on: the architecture, the batch's shape, the loop's
    settings that change a step's work (not its seed, learning rate or length)."""
    cfg = built.cfg
    x = built.data.batches(0)[0]
    return json.dumps([task, {k: v for k, v in built.arch.items() if k != "vocab"}, list(x.shape),
                       cfg.optimizer, cfg.precision, cfg.micro_batches, cfg.progressive,
                       cfg.outputs_from, cfg.eval_batch_size, compile_], sort_keys=True, default=str)


def _validation(built, device: str):
    """The validation timer of a run: seconds of one pass over its validation set."""
    import torch

    from arithrepro.estimate import forward_seconds, time_call

    if callable(built.data.valid):   # the task's own validation (modular): timed as it runs
        def timer(net):
            net.eval()
            try:
                return time_call(lambda: built.data.valid(net), torch.device(device))
            finally:
                net.train()

        return timer
    make_batch, n = built.data.valid
    x = make_batch(torch.arange(min(built.cfg.eval_batch_size, n)))[0]
    return lambda net: forward_seconds(net, x, built.cfg.precision) * n
