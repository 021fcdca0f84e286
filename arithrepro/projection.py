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
    """A configuration's runs (those `keep` kept): `build()` -> the first of them (runs.Built)
    on data made in memory."""
    config: object      # runs.Config
    runs: list          # runs.Run
    build: Callable

    task = property(lambda self: self.config.task)

    @property
    def label(self) -> str:
        return self.config.name + (" (bench)" if self.config.home else "")


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
                yield Shape(config, runs, lambda run=runs[0], task=task, where=where:
                            build(task, run, params, where, trial=True))


def project(params: dict, tasks, warmup: int, steps: int, keep: Callable = lambda run: True,
            timings: dict | None = None, echo: Callable = lambda line: None,
            stop_after_s: float | None = None) -> list[tuple[Projection, list]]:
    """(projection, its runs) for every shape of the runs `keep` keeps; `timings` (shape key ->
    Timing) shared across calls times each shape once. With `stop_after_s`, stops once the
    projections add up to more than that many seconds (enough to know a budget is exceeded)."""
    from arithrepro.models.registry import spec_of

    device = resolve_device(params["device"])
    timings = {} if timings is None else timings
    out, total = [], 0.0
    for shape in shapes(params, tasks, keep):
        built = shape.build()
        key = _shape_key(shape.task, built, params["compile"])
        if key not in timings:
            echo(f"timing {shape.task} {shape.label}")
            timer = _validation(built, device)
            timings[key] = Timing(time_steps(built.net, built.data.batches, built.cfg, warmup,
                                             steps, spec_of(built.arch)),
                                  timer(built.net))
        row = Projection(shape.task, shape.label, len(shape.runs), built.data.batches.steps,
                         validations(built.data.batches, built.cfg), timings[key])
        del built
        out.append((row, shape.runs))
        total += row.total_s
        if stop_after_s is not None and total > stop_after_s:
            break
    return out


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
