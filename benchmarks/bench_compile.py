"""torch.compile, and on a GPU the captured static step (`graphs`), against eager on this
device: the training loop's step (fit, through the estimate command's clock) for grid cells and
charlm models at the cpu profile's batches, eager measured in the same run as the reference;
with the compile cost (the warm-up steps' extra time) and the steps after which compiling has
paid for itself."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

# ReTran is left out: it runs eager under compile (its registry entry's `eager`).
CELLS = [("expr", "gpt", "small"), ("expr", "gpt", "large"), ("expr", "lstm", "medium"),
         ("abacus", "abacus", "l2r2"), ("looped", "looped", "notebook")]


def _timed(build, cfg, warmup: int, timed: int):
    """(seconds per step after warm-up, seconds of the warm-up) for a fresh model."""
    from arithrepro.estimate import time_steps

    net, batches = build()
    t0 = time.perf_counter()
    step = time_steps(net, batches, cfg, warmup, timed)
    return step, time.perf_counter() - t0 - step * timed


def bench_compile(params: dict, device: str, warmup: int = 3, timed: int = 10) -> None:
    from arithrepro.models.registry import build_model

    from arithrepro.runner import configure
    from arithrepro.runs import Placement
    from arithrepro.tasks.registry import TASKS

    params = {**params, "profile": "cpu"}
    print(f"torch.compile vs eager on {device}: {warmup} warm-up steps, then {timed} timed")
    for task, model, size in CELLS:
        arch, cfg = configure(TASKS[task].config(params, model, size, seeds=(0,)).runs[0],
                              Placement(device, "fp32", params["compile"]))

        def build():
            torch.manual_seed(0)
            net = build_model(arch["model"], arch["size"], dropout=arch["dropout"], form=arch.get("form"),
                              **arch["dims"]).to(device)
            return net, TASKS[task].sample_batches(params, 0, device)

        eager, eager_warm = _timed(build, replace(cfg, compile=False), warmup, timed)
        # on a GPU also CUDA graphs (the step's launches replayed as one)
        for mode in [True] + (["reduce-overhead"] if device.startswith("cuda") else []):
            torch._dynamo.reset()
            compiled, compiled_warm = _timed(build, replace(cfg, compile=mode), warmup, timed)
            cost = compiled_warm - eager_warm
            pays = (f"pays after {cost / (eager - compiled):,.0f} steps" if compiled < eager
                    else "never pays")
            label = "compiled" if mode is True else mode
            print(f"  {task} {model}-{size}: eager {1000 * eager:.1f} ms/step, {label} "
                  f"{1000 * compiled:.1f} ms/step = {eager / compiled:.2f}x; compiling costs "
                  f"{cost:.0f} s, {pays}", flush=True)
        if device.startswith("cuda"):   # the static step captured (params `graphs`, every model)
            graphs, graphs_warm = _timed(build, replace(cfg, compile=False, graphs=True), warmup,
                                         timed)
            print(f"  {task} {model}-{size}: eager {1000 * eager:.1f} ms/step, graphs "
                  f"{1000 * graphs:.1f} ms/step = {eager / graphs:.2f}x; capture costs "
                  f"{graphs_warm - eager_warm:.0f} s", flush=True)
