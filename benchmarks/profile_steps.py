"""Where a training step's time goes: torch profiler per op and per module, for every run shape
of a profile (default: cpu), built by the estimate command's own code.

    python -m benchmarks.profile_steps [--profile cpu] [--task expr]... [--steps 3] [--top 8]

A step is split into forward (the loss), backward and optimizer; the forward is further split by
module (attention, feed-forward, recurrent cell, norms, embedding and head) with hooks that open a
profiler range per module call; the ops are ranked by self time over the whole step.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile, record_function


def _module_ranges(net) -> list:
    """Hooks that wrap each interesting module's forward in a profiler range named by its class
    (the outermost one wins, so a Block's attention is counted as attention)."""
    from torch import nn

    handles, depth = [], [0]
    kinds = ("Attention", "Sequential", "LayerNorm", "SourceLSTMCell", "ElmanCell", "GRUCell",
             "Embedding", "Linear", "AbacusPositions", "ReTranCore", "RecurrentCore", "LSTMCore")

    def pre(module, args):
        depth[0] += 1
        if depth[0] == 1:
            name = "MLP" if isinstance(module, nn.Sequential) else type(module).__name__
            module._range = record_function(f"module::{name}")
            module._range.__enter__()

    def post(module, args, out):
        if depth[0] == 1 and getattr(module, "_range", None) is not None:
            module._range.__exit__(None, None, None)
            module._range = None
        depth[0] -= 1

    for m in net.modules():
        if type(m).__name__ in kinds or isinstance(m, nn.Sequential):
            handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
    return handles


def profile_job(net, batches, cfg, steps: int, top: int) -> str:
    from arithrepro.device import autocast
    from arithrepro.train.micro import micro_batches
    from arithrepro.train.losses import training_loss
    from arithrepro.train.parts import make_optimizer

    device = next(net.parameters()).device
    opt = make_optimizer(net, cfg)
    recurrences = net.core.recurrences if cfg.progressive else 0
    net.train()

    def step(i):
        x, y, mask = batches(i)
        count = mask[:, cfg.outputs_from:].sum()
        opt.zero_grad(set_to_none=True)
        trim = getattr(net.core, "prunes_outputs", False)
        for *piece, start in micro_batches(x, y, mask, cfg.micro_batches, trim):  # as fit() does
            with record_function("phase::forward"), autocast(device.type, cfg.precision):
                loss = training_loss(net, *piece, recurrences, start or cfg.outputs_from, count)
            with record_function("phase::backward"):
                loss.backward()
        with record_function("phase::optimizer"):
            opt.step()

    step(0)  # first-call allocations
    handles = _module_ranges(net)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(1, steps + 1):
            step(i)
    for h in handles:
        h.remove()
    events = prof.key_averages()
    ranges = {e.key: e.cpu_time_total for e in events if e.key.startswith(("phase::", "module::"))}
    total = sum(v for k, v in ranges.items() if k.startswith("phase::"))
    ops = sorted((e for e in events if not e.key.startswith(("phase::", "module::"))),
                 key=lambda e: e.self_cpu_time_total, reverse=True)
    per_step = total / steps / 1000
    phases = " / ".join(f"{k[7:]} {v / total:.0%}" for k, v in ranges.items() if k.startswith("phase::"))
    forward = ranges.get("phase::forward", 1)
    modules = ", ".join(f"{k[8:]} {v / forward:.0%}" for k, v in
                        sorted(ranges.items(), key=lambda kv: -kv[1]) if k.startswith("module::"))
    top_ops = ", ".join(f"{e.key.removeprefix('aten::')} {e.self_cpu_time_total / total:.0%}"
                        for e in ops[:top])
    n_ops = sum(e.count for e in events if e.key.startswith("aten::")) / steps
    return (f"{per_step:.0f} ms/step (profiled), {n_ops:,.0f} aten calls/step; {phases}\n"
            f"    forward by module: {modules}\n    top ops (self time): {top_ops}")


def main() -> None:
    from arithrepro import config
    from arithrepro.projection import shapes

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--task", action="append", default=None)
    ap.add_argument("--only", default=None, help="comma-separated run labels, e.g. gpt-large")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    params = {**config.load(args.params), "profile": args.profile, "device": "cpu",
              "precision": "fp32"}
    tasks = args.task or ["expr", "abacus", "looped", "modular", "charlm"]
    only = set(args.only.split(",")) if args.only else None
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{torch.backends.cpu.get_cpu_capability()}; profile {args.profile}")
    seen = set()
    for job in shapes(params, tasks):
        if (job.task, job.label) in seen or (only and job.label not in only):
            continue
        seen.add((job.task, job.label))
        b = job.build()
        print(f"{job.task} {job.label}: "
              f"{profile_job(b.net, b.data.batches, b.cfg, args.steps, args.top)}",
              flush=True)


if __name__ == "__main__":
    main()
