"""Benchmarks: every number is printed beside a reference measured in the same run.

    python -m benchmarks.run [--batch 256] [--repeats 3] [--only steps,mfu,retran,decode,dropout,gen,abacus,modular,compile,ensemble,copies,processes]

- steps:  the training loop's step (forward, backward, LAMB; micro-batches where the model
          has them) of every expr model/size at the cpu profile's batch, with model FLOP/s as a
          fraction of this machine's fp32 matmul peak (measured first, in the same run).
- mfu:    GPT-large model FLOP/s / matmul peak (goal >= 50 %).
- retran: the fast exact ReTran against the naive per-token one in benchmarks/naive_retran.py
          (goal >= 3x), forward + backward.
- decode: cached greedy decoding against recomputing the whole prefix for every token (goal >= 5x).
- gen:    problem generation, pooled fast generator against the plain single-process one.
- abacus: vectorized Abacus positions against a per-sample Python loop, batch 256 (goal >= 50x).
- modular: the modular studies' LSTM and GPT train step at the source's defaults against the
          source's reported s/step (goal >= 5x), with FLOP/s of peak (bench_modular.py).
- dropout: arithrepro's dropout (mask from torch.rand) against nn.Dropout (bernoulli_), and
          attention with dropout outside SDPA against SDPA with dropout_p, forward + backward.
- compile: the training loop's step through torch.compile against eager (bench_compile.py), on
          the params' device, with what compiling costs and after how many steps it pays.
- ensemble: 3 and 5 runs of the first cell of every model trained as one ensemble against the
          same runs one after another in one process (bench_ensemble.py).
- processes: as many runs as cores, each a process on one core, against the same runs one
          after another with every core: what `arithrepro repro` does.
The machines are shared and noisy: compare ratios, not seconds, across runs.
"""

from __future__ import annotations

import argparse
import time

import torch
import yaml

SEQ = 37  # expr input positions: <start> + 30 + '=' + 5 + <stop>, minus the shifted one


def best_of(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul_peak(repeats: int) -> float:
    """fp32 FLOP/s of a large square matmul: the ceiling the model numbers are compared with."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    seconds = best_of(lambda: [a @ b for _ in range(8)], repeats)
    return 8 * 2 * 1024 ** 3 / seconds


def build(model: str, size: str, params: dict):
    from arithrepro.models.registry import build_model

    torch.manual_seed(0)
    return build_model(model, params["models"][model]["sizes"][size], vocab_size=19,
                       dropout=params["models"][model]["dropout"], max_len=48, pad_id=3)


def loop_positions(is_digit: torch.Tensor) -> torch.Tensor:
    """Abacus positions the obvious way: a Python loop over samples and tokens."""
    rows = []
    for row in is_digit.tolist():
        run, out = 0, []
        for d in row:
            run = run + 1 if d else 0
            out.append(run)
        rows.append(out)
    return torch.tensor(rows)


def bench_abacus(batch, repeats):
    """Vectorized Abacus positions vs the per-sample loop, on real training batches."""
    from arithrepro.models.abacus import abacus_positions
    from arithrepro.tasks.abacus import sample

    g = torch.Generator().manual_seed(0)
    n1, n2 = (torch.randint(1, 21, (batch,), generator=g) for _ in range(2))
    tokens, _, _ = sample(n1, n2, g)
    is_digit = tokens < 10
    assert torch.equal(abacus_positions(is_digit), loop_positions(is_digit))
    fast = best_of(lambda: abacus_positions(is_digit), repeats)
    slow = best_of(lambda: loop_positions(is_digit), repeats)
    print(f"\n== Abacus positions, batch {batch} of 20-digit additions ({tokens.size(1)} tokens)")
    print(f"per-sample loop {1e3 * slow:.2f} ms   vectorized {1e3 * fast:.3f} ms   "
          f"speed-up {slow / fast:.0f}x (goal 50x)")


def model_flops(net, tokens: int) -> float:
    """Training FLOPs of one step: 6 per matmul weight per token, plus causal attention."""
    matmul = sum(m.weight.numel() for m in net.modules() if isinstance(m, torch.nn.Linear))
    attn = 0
    for m in net.modules():
        if hasattr(m, "head_dim") and hasattr(m, "heads"):
            attn += 6 * SEQ * m.heads * m.head_dim  # q.k and w.v over ~SEQ/2 keys, fwd + bwd
    return (6 * matmul + attn) * tokens


def loop_step(params, model: str, size: str, batch: int, repeats: int) -> float:
    """Seconds per step of the training loop itself (fit, through the estimate command's clock)
    for an expr cell at `batch`, on problems drawn at the paper's lengths: what `arithrepro
    train` runs, micro-batches and the cell's optimizer included."""
    from dataclasses import replace

    from arithrepro.estimate import time_steps
    from arithrepro.models.registry import MODELS, build_model

    from arithrepro.runner import configure
    from arithrepro.runs import Placement
    from arithrepro.tasks.registry import TASKS

    p = {**params, "expr": {**params["expr"], "train": {**params["expr"]["train"],
                                                        "batch_size": batch}}}
    arch, cfg = configure(TASKS["expr"].config(p, model, size, seeds=(0,)).runs[0],
                          Placement("cpu", "fp32", p["compile"]))
    torch.manual_seed(0)
    net = build_model(model, arch["size"], dropout=arch["dropout"], form=arch.get("form"),
                      **arch["dims"])
    batches = TASKS["expr"].sample_batches(p, 0, "cpu")
    real = float(sum((batches(i)[0] != 3).sum() for i in range(4))) / 4  # non-<pad> inputs
    return time_steps(net, batches, replace(cfg), 2, 2 * repeats, MODELS[model]), real


def bench_steps(params, batch, repeats, peak, only_gpt_large=False):
    """Model FLOP/s two ways: over all B x 37 input positions (what a padded step would compute)
    and over the real (non-<pad>) tokens only, the work the step must do; the second is the
    honest utilization once padding is skipped."""
    print(f"\n== training-loop step at batch {batch} (x {SEQ} positions, paper lengths); "
          f"peak {peak / 1e9:.1f} GFLOP/s")
    print(f"{'cell':<14}{'params':>10}{'s/step':>9}{'tokens/s':>11}{'GFLOP/s':>9}"
          f"{'peak, all':>11}{'peak, real':>12}")
    rows = {}
    for model in params["expr"]["models"]:
        for size in params["expr"]["sizes"]:
            if only_gpt_large and (model, size) != ("gpt", "large"):
                continue
            net = build(model, size, params)
            s, real = loop_step(params, model, size, batch, repeats)
            flops = model_flops(net, batch * SEQ) / s
            n = sum(p.numel() for p in net.parameters())
            rows[(model, size)] = (s, real / (batch * SEQ))
            print(f"{model + '-' + size:<14}{n:>10,}{s:>9.3f}{batch * SEQ / s:>11,.0f}"
                  f"{flops / 1e9:>9.1f}{flops / peak:>11.1%}"
                  f"{flops * real / (batch * SEQ) / peak:>12.1%}", flush=True)
    return rows


def bench_retran(params, batch, repeats):
    from benchmarks.naive_retran import naive_retran

    print(f"\n== ReTran forward + backward at batch {batch}: fast exact vs naive per-token")
    for size in params["expr"]["sizes"]:
        net = build("retran", size, params).train()
        x = torch.randint(4, 19, (batch, SEQ))

        def fast():
            net(x).sum().backward()

        def naive():
            naive_retran(net.core, net.drop(net.embed(x))).sum().backward()

        f, n = best_of(fast, repeats), best_of(naive, repeats)
        print(f"retran-{size:<8} fast {f:7.3f} s   naive {n:7.3f} s   speed-up {n / f:5.2f}x (goal 3x)")


def bench_decode(params, batch, repeats):
    from arithrepro.decoding import greedy_decode

    print(f"\n== greedy decoding of {batch} prompts (12-32 tokens, 6 new): cache vs recompute")
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, 19, (batch, 40), generator=g)
    plen = torch.randint(12, 33, (batch,), generator=g)

    @torch.no_grad()
    def recompute(net):
        # Each step runs the whole prefix again; samples advance in lockstep as in greedy_decode.
        lo, hi = int(plen.min()), int(plen.max())
        seq = tokens[:, :lo]
        for t in range(lo, hi + 6):
            pred = net(seq)[:, -1].argmax(-1)
            nxt = torch.where(t < plen, tokens[:, min(t, 39)], pred)
            seq = torch.cat([seq, nxt[:, None]], 1)
        return seq

    for model in params["expr"]["models"]:
        net = build(model, "large", params).eval()
        c = best_of(lambda: greedy_decode(net, tokens, plen, 6, stop_id=-1), repeats)
        r = best_of(lambda: recompute(net), repeats)
        print(f"{model}-large  cached {c:7.3f} s   recompute {r:7.3f} s   speed-up {r / c:5.2f}x (goal 5x)")


def bench_dropout(repeats):
    import torch.nn.functional as F

    from arithrepro.models.dropout import Dropout
    from arithrepro.models.transformer import _attention_with_dropout, _causal_bias

    print("\n== dropout 0.1, forward + backward")
    x = torch.randn(256 * 37, 512, requires_grad=True)
    plain, ours = torch.nn.Dropout(0.1), Dropout(0.1)
    a = best_of(lambda: plain(x).sum().backward(), repeats)
    b = best_of(lambda: ours(x).sum().backward(), repeats)
    print(f"256 x 37 x 512 values: nn.Dropout {1e3 * a:.1f} ms   rand mask {1e3 * b:.1f} ms   "
          f"speed-up {a / b:.2f}x")
    for hs in (4, 16):  # GPT-small's and GPT-large's head sizes, 8 heads, a 64-row piece
        q, k, v = (torch.randn(64, 8, 30, hs, requires_grad=True) for _ in range(3))
        bias = _causal_bias(30, 30, q.dtype, q.device)
        a = best_of(lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)
                    .sum().backward(), repeats)
        b = best_of(lambda: _attention_with_dropout(q, k, v, bias, 0.1).sum().backward(), repeats)
        print(f"causal attention (64, 8, 30, {hs}): SDPA {1e3 * a:.1f} ms   outside SDPA "
              f"{1e3 * b:.1f} ms   speed-up {a / b:.2f}x")


def bench_gen(n):
    from benchmarks.bench_generation import bench_generation

    print(f"\n== expr problem generation, {n:,} unique problems (paper length rules)")
    r = bench_generation(n)
    print(f"plain single-process {r['plain_s']:.2f} s   pooled (2 workers) {r['fast_s']:.2f} s   "
          f"speed-up {r['speedup']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--batch", type=int, default=None, help="default: the cpu profile's batch")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gen-n", type=int, default=200_000)
    ap.add_argument("--only", default="steps,mfu,retran,decode,dropout,gen,abacus,modular,compile,"
                                      "ensemble,copies,processes")
    args = ap.parse_args()
    params = yaml.safe_load(open(args.params))
    batch = args.batch or params["expr"]["train"]["batch_size"]
    only = set(args.only.split(","))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    peak = matmul_peak(args.repeats) if only & {"steps", "mfu", "modular"} else None
    if only & {"steps", "mfu"}:
        rows = bench_steps(params, batch, args.repeats, peak, only_gpt_large="steps" not in only)
        if ("gpt", "large") in rows:
            net = build("gpt", "large", params)
            s, real = rows[("gpt", "large")]
            mfu = model_flops(net, batch * SEQ) / s / peak
            print(f"GPT-large model FLOP/s = {mfu:.1%} of the measured matmul peak over all "
                  f"positions, {mfu * real:.1%} over the real tokens (goal 50 %)")
    if "retran" in only:
        bench_retran(params, batch, args.repeats)
    if "decode" in only:
        bench_decode(params, batch, args.repeats)
    if "dropout" in only:
        bench_dropout(max(args.repeats, 5))
    if "gen" in only:
        bench_gen(args.gen_n)
    if "abacus" in only:
        bench_abacus(256, max(args.repeats, 5))
    if "modular" in only:
        from benchmarks.bench_modular import bench_modular

        bench_modular(params, max(args.repeats, 5), peak, best_of)
    if "compile" in only:
        from arithrepro.device import resolve_device
        from benchmarks.bench_compile import bench_compile

        bench_compile(params, resolve_device(params["device"]))
    if "ensemble" in only:
        from benchmarks.bench_ensemble import bench_ensemble

        bench_ensemble(params, (3, 5))
    if "copies" in only:
        from arithrepro.device import resolve_device
        from benchmarks.bench_copies import bench_copies

        bench_copies((3, 5), max(args.repeats, 5), resolve_device(params["device"]))
    if "processes" in only:
        from benchmarks.bench_ensemble import bench_processes

        bench_processes(params, torch.get_num_threads())


if __name__ == "__main__":
    main()
