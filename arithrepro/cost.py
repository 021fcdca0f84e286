"""The cost of generating and of training on T tokens: the formulas, the matmul FLOPs
torch counts, and measured time (the charlm compute table, docs/charlm.md).

Formulas (L layers of width D; per sequence of T tokens):
- recurrent: 4·g·T·L·D² to generate and 8·g·T·L·D² to train, where g counts the matrices a
  cell multiplies its state by (Elman 1; GRU 3, one per gate: the source's RNN formula states
  g = 1); T·L sequential matmuls to generate and 2·T·L to train (the source's: backpropagation
  through time is as sequential as the forward pass);
- transformer: 24·L·T·D² + 4·L·T²·D per forward pass, 6·L sequential matmuls per forward pass
  and 6·L per backward pass (the source's), so 12·L to train on T tokens, whose backward costs
  twice the forward's FLOPs (3x the forward in all). Generating T tokens with a key/value cache
  does the same projections one token at a time: T passes of 6·L sequential matmuls, 6·L·T
  (the source answered 6·L, one pass, for generating T tokens; each token needs the one
  before it, so the passes do not overlap).
The formulas leave out the embedding and the head (2·V·D per token), a narrow first recurrent
layer and the elementwise work; the counted column includes the head and shows the difference.
Measured time is at batch 1, so it shows the latency of the sequential chain that the FLOP
count does not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from arithrepro.estimate import time_call, time_steps


def formulas(spec, size: dict, T: int) -> dict:
    """FLOPs and sequential matmuls to generate and to train on T tokens by the formula the
    model's registry entry declares (`spec.cost`, `spec.gates`), and whose formula it is: the
    source's ("source": the RNN's, g = 1, and the transformer's), or this project's extension of
    the RNN formula to g > 1 (the GRU's g = 3)."""
    L, D = size["layers"], size["d_model"]
    if spec.cost not in ("recurrent", "attention"):
        raise ValueError(f"no cost formula for a model declaring cost {spec.cost!r}")
    if spec.cost == "recurrent":
        g = spec.gates
        return {"formula_gen_flops": 4 * g * T * L * D * D, "formula_train_flops": 8 * g * T * L * D * D,
                "seq_matmuls_gen": T * L, "seq_matmuls_train": 2 * T * L,
                "formula": "source" if g == 1 else f"ours (source's RNN, g = {g})"}
    forward = 24 * L * T * D * D + 4 * L * T * T * D
    # generating: T cached passes (the source: 6·L); training: one pass forward, one backward
    return {"formula_gen_flops": forward, "formula_train_flops": 3 * forward,
            "seq_matmuls_gen": 6 * L * T, "seq_matmuls_train": 6 * L + 6 * L, "formula": "source"}


def _flop_counter():
    """torch's FlopCounterMode, also counting the CPU kernel of fused attention (torch counts
    the CUDA kernels only, so on CPU attention would count as free)."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    mapping = {}
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        mapping[aten._scaled_dot_product_flash_attention_for_cpu] = (
            lambda q, k, v, *a, **kw: fc.sdpa_flop_count(q, k, v))
        mapping[aten._scaled_dot_product_flash_attention_for_cpu_backward] = (
            lambda g, q, k, v, *a, **kw: fc.sdpa_backward_flop_count(g, q, k, v))
    return fc.FlopCounterMode(display=False, custom_mapping=mapping)


def _train_pass(model, x):
    def run():
        model.zero_grad(set_to_none=True)
        logits = model(x)
        F.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()
    return run


def _generate(model, T: int, context: int | None):
    from arithrepro.decoding import sample

    prompt = torch.zeros(1, dtype=torch.long)

    def run():
        sample(model, prompt, T - 1, 1.0, torch.Generator().manual_seed(0), context)
    return run


def measure(model, T: int, context: int | None, repeats: int) -> dict:
    """Counted FLOPs and median seconds per token, generating T tokens (the first given) and
    training on one sequence of T tokens, at batch 1 on the model's device."""
    device = next(model.parameters()).device
    x = torch.randint(0, model.head.out_features, (1, T), generator=torch.Generator().manual_seed(0))
    x = x.to(device)
    model.train()  # dropout off or not, the matmuls are the same
    train, gen = _train_pass(model, x), _generate(model, T, context)
    with _flop_counter() as fc:
        train()
    train_flops = fc.get_total_flops()
    with _flop_counter() as fc:
        gen()
    gen_flops = fc.get_total_flops()
    model.train()
    t_train = time_call(train, device, repeats, budget=None)
    t_gen = time_call(gen, device, repeats, budget=None)
    model.zero_grad(set_to_none=True)
    return {"counted_gen_flops": gen_flops, "counted_train_flops": train_flops,
            "gen_s_per_token": t_gen / T, "train_s_per_token": t_train / T,
            "gen_gflops_per_s": gen_flops / t_gen / 1e9, "train_gflops_per_s": train_flops / t_train / 1e9}


def written_out(model):
    """`model` with every attention module computing softmax(q kᵀ / √d + mask) v with the
    weights materialized (Attention.attend_manual, the source's path with flash attention off)
    instead of the fused kernel; the same maths (tests hold the logits equal)."""
    from arithrepro.models.transformer import Attention

    for m in model.modules():
        if isinstance(m, Attention):
            def attend(q, k, v, causal, mask=None, m=m):
                return m.attend_manual(q, k, v, causal, mask)[0]
            m.attend = attend   # an instance attribute: this model only
    return model


def step_rows(params: dict, rounds: int, warmup: int, timed: int) -> list[dict]:
    """Seconds per 100 training steps of every charlm architecture at every schedule's sequence
    length, at the params' batch and optimizer, through the one training loop
    (estimate.time_steps), on characters drawn at random from a 96-character vocabulary (a
    step's time depends on the shapes, not the text); the transformers a second time with
    their attention written out. `rounds` rounds, each timing every configuration once in an
    order rotated by one per round, so that a drift in the machine's speed falls on all alike
    and two configurations of one round can be compared as a pair."""
    import torch

    from arithrepro.config import resolve_graphs
    from arithrepro.models.registry import spec_of
    from arithrepro.projection import placement
    from arithrepro.runner import build
    from arithrepro.runs import Placement
    from arithrepro.tasks.charlm import TASK

    device, precisions = placement(params)
    where = Placement(device, precisions["charlm"], params["compile"],
                      resolve_graphs(params["graphs"], device, precisions["charlm"]))
    m = params["charlm"]
    configs = []
    for name, arch in m["architectures"].items():
        for schedule in m["schedules"]:
            run = TASK.config(params, name, schedule, seeds=m["seeds"][:1]).runs[0]
            for path in ("fused", "written-out") if arch["model"] == "nanogpt" else ("",):
                built = build(TASK, run, params, where, trial=True)
                if path == "written-out":
                    written_out(built.net)
                configs.append(({"model": name, "arch": arch["model"],
                                 "T": m["schedule"][schedule]["seq_length"], "attention": path,
                                 "batch_size": int(built.data.batches(0)[0].shape[0])},
                                built, spec_of(built.arch)))
    rows = []
    for r in range(rounds):
        turn = r % len(configs)
        for key, built, spec in configs[turn:] + configs[:turn]:
            s = time_steps(built.net, built.data.batches, built.cfg, warmup, timed, spec)
            rows.append({**key, "round": r, "threads": torch.get_num_threads(),
                         "s_per_100_steps": 100 * s})
    return rows
