"""Problem generation: the plain single-process generator against the pooled fast one.

Both run in the same process and the same call, so they see the same machine load;
on a shared machine only their ratio is worth comparing across runs.
"""

from __future__ import annotations

import time

from arithrepro.tasks.expr_grammar import generate_unique
from benchmarks.plain_expr_generator import generate_plain

# The paper's pool settings (lengths 8..30, answers up to 5 characters, seed 0).
_PAPER = dict(seed=0, min_in=8, max_in=30, min_out=0, max_out=5)


def bench_generation(n: int = 200_000) -> dict:
    """Seconds for n unique problems with `generate_plain` and `generate_unique(workers=2)`."""
    start = time.perf_counter()
    plain, _ = generate_plain(n, **_PAPER)
    plain_s = time.perf_counter() - start

    start = time.perf_counter()
    fast, _ = generate_unique(n, stream="pool", workers=2, **_PAPER)
    fast_s = time.perf_counter() - start

    assert len(plain) == len(fast) == n
    return {"n": n, "plain_s": round(plain_s, 3), "fast_s": round(fast_s, 3),
            "speedup": round(plain_s / fast_s, 2)}


if __name__ == "__main__":
    print(bench_generation())
