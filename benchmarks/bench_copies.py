"""Do the hand-written copies forms of the fused recurrences pay? An ensemble's E copies run
each recurrent layer either as one copies Function (models/recurrence_copies.py: every step one
batched matmul for all copies) or, derived from the plain Function with nothing written twice,
as the plain Function once per copy. This times the forward and backward of both on the same
tensors, at the shapes of the cpu profile's first cells (B x T x d), and prints the ratio
(> 1: the copies form is faster).

    python -m benchmarks.bench_copies [--copies 3,5] [--repeats 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import time

import torch

from arithrepro.models import recurrence as plain
from arithrepro.models import recurrence_copies as copies

# (name, B, T, d): expr's LSTM (batch 64, 37 positions, d 128), charlm's RNN and GRU (seq 20)
SHAPES = (("lstm-source", 64, 37, 128), ("lstm-standard", 64, 37, 128),
          ("elman", 64, 20, 128), ("gru", 64, 20, 128))


def arguments(name: str, E: int, B: int, T: int, d: int, device) -> tuple[list, object, object]:
    """(stacked arguments, the copies Function's apply, the plain apply for one copy)."""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return (0.1 * torch.randn(E, *shape, generator=g)).to(device).requires_grad_()

    if name.startswith("lstm"):
        F = d
        args = [r(B, T, d), r(4 * F, d), r(4 * F), r(4 * F, d)]
        args += ([r(d, F), r(d), r(B, d), r(B, F), r(d, F), r(d)] if name == "lstm-source"
                 else [None] * 6)
        rows = plain.Rows.full(B, T, device)
        return (args, copies.LSTMCopies.apply,
                lambda *a: plain.LSTMRecurrence.apply(a[0], rows, *a[1:]))
    width = 3 * d if name == "gru" else d
    fns = (copies.GRUCopies, plain.GRURecurrence) if name == "gru" else (copies.ElmanCopies,
                                                                          plain.ElmanRecurrence)
    return [r(B, T, width), r(width, d)], fns[0].apply, fns[1].apply


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(step, repeats: int, device) -> float:
    step()   # warm-up: buffers, kernels
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def retran(E: int, B: int, T: int, device):
    """(E ReTran models at expr's medium size, one batch without padding): the copies form
    runs them as one ensemble (its layers ReTranCopies), the plain one model by model (each
    its FusedLayer); the embedding and head around the core run both ways alike."""
    from arithrepro.stacking import Ensemble
    from arithrepro.models.registry import build_model

    size = {"d_model": 32, "d_ff": 128, "d_sa": 32, "layers": 4, "heads": 8}
    models = []
    for e in range(E):
        torch.manual_seed(e)
        models.append(build_model("retran", size, dropout=0.0, vocab_size=20, max_len=T,
                                  pad_id=19).to(device).train())
    x = torch.randint(0, 19, (B, T), generator=torch.Generator().manual_seed(0)).to(device)
    ens = Ensemble(models).train()

    def per_copy():
        torch.stack([m(x) for m in models]).sum().backward()

    def together():
        ens(x.expand(E, B, T)).sum().backward()

    return per_copy, together


def bench_copies(copies_list=(3, 5), repeats: int = 5, device: str = "cpu") -> list[dict]:
    print(f"\n== an ensemble's recurrent layer: the copies Function vs the plain one per copy "
          f"({device}, {torch.get_num_threads()} threads; forward + backward, best of {repeats})")
    print(f"{'layer':<16}{'E':>3}{'B x T x d':>14}{'per copy':>11}{'copies':>9}{'ratio':>8}")
    rows = []
    for name, B, T, d in SHAPES:
        for E in copies_list:
            args, stacked, one = arguments(name, E, B, T, d, device)
            tensors = [a for a in args if a is not None]

            def together():
                out = stacked(*args)
                torch.autograd.grad(out.sum(), tensors)

            def per_copy():
                outs = [one(*(None if a is None else a[e] for a in args)) for e in range(E)]
                torch.autograd.grad(torch.stack(outs).sum(), tensors)

            rows.append(_row(name, E, f"{B}x{T}x{d}", per_copy, together, repeats, device))
    for E in copies_list:   # a whole model: ReTran's layers are most of its step
        rows.append(_row("retran (model)", E, "64x37x32", *retran(E, 64, 37, device), repeats,
                         device))
    return rows


def _row(name, E, shape, per_copy, together, repeats, device) -> dict:
    a, b = timed(per_copy, repeats, device), timed(together, repeats, device)
    print(f"{name:<16}{E:>3}{shape:>14}{1000 * a:>9.1f}ms{1000 * b:>7.1f}ms{a / b:>7.2f}x",
          flush=True)
    return {"layer": name, "copies": E, "per_copy_s": a, "copies_s": b}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", default="3,5")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    bench_copies(tuple(int(e) for e in a.copies.split(",")), a.repeats, a.device)
