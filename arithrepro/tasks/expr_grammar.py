"""The arithmetic-problem grammar: sampling with exact answers, and deterministic unique pools.

Grammar (expanded leftmost-first, start symbol EQ):
    EQ   -> VAL OP VAL (0.5) | ( VAL OP VAL ) (0.5)
    VAL  -> EQ (0.46) | NUM (0.54)
    OP   -> + (0.35) | - (0.35) | * (0.30)
    NUM  -> 0 (0.05) | NUMH NUMT (0.95)
    NUMH -> 1..9 | -1..-9            (1/18 each)
    NUMT -> DIGIT NUMT (0.02 each) | empty (0.80)
with sign folding ``--`` -> ``+`` and ``+-`` -> ``-`` as the string is built.

This module is pure stdlib on purpose: data stages import it without paying for torch.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import random
from functools import partial
from itertools import count, islice
from typing import Callable, Iterator

# Every VAL is decided by one uniform r, and the probabilities appear as literals in
# `_draws` (constant-folded by the compiler, so no global look-ups in the hot loop):
#   [0, .23)      ( EQ )          .46 * .5
#   [.23, .46)    EQ              .46 * .5     (inside each EQ range, r also picks the OP)
#   [.46, .487)   NUM -> 0        .54 * .05
#   [.487, 1)     NUM -> NUMH NUMT: 18 heads x 50 sub-slots, 40 of which end the number
#                 (NUMT -> empty, .8) and 10 give its first tail digit (.02 each).
# All choices are independent, so the order they are drawn in does not matter: the VAL
# choices (the tree) are drawn first, and a tree too big for max_in is dropped before any
# of its text is built. Most rejected draws end there, cheaply.

# EQ frame codes: OP in the low bits (1 +, 2 -, 3 *), 4 set when parenthesised; 0 is a
# pending ")". Every EQ-range boundary (.0805, .161, .23, ...) is a multiple of 1e-4, so
# a 4600-entry table indexed by int(r * 10000) picks the code exactly.
_EQ_CODES = tuple(
    (4 if u < 2300 else 0) + (1 if u % 2300 < 805 else 2 if u % 2300 < 1610 else 3)
    for u in range(4600))
_EQ_CODES += (_EQ_CODES[-1],)  # float rounding of r * 10000 up to 4600 lands here

_HEADS: list[tuple[str, int, bool]] = []  # 900 slots of (text, value, tail goes on)
for _h in (*range(1, 10), *range(-1, -10, -1)):
    _HEADS += [(str(_h), _h, False)] * 40
    for _d in range(10):
        _v = _h * 10 + (_d if _h > 0 else -_d)
        _HEADS.append((str(_v), _v, True))
_HEADS.append(_HEADS[-1])  # float rounding at r -> 1 lands here
_HEADS = tuple(_HEADS)


def _draws(rng: random.Random, max_in: int) -> Iterator[tuple[str, int] | None]:
    """Endless draws of the grammar: (folded problem, exact value), or None when a draw
    outgrew max_in. A generator rather than a function per draw: the per-draw call and
    set-up cost ~6%.

    The value is computed while the string is generated. Terminals arrive left to
    right, so an evaluator that keeps, per parenthesis level, ``acc`` (sum of finished
    terms) and ``coef`` (what the next operand gets multiplied by: +1, -1, or the
    product so far) handles precedence without a tree. Folding never changes the value
    (``a--3`` is ``a+3``), so the evaluator just sees the unfolded tokens.
    """
    rnd = rng.random
    eq_codes, heads = _EQ_CODES, _HEADS
    rs: list[float] = []
    push = rs.append
    frames: list[int] = []  # EQ codes still due, innermost last
    levels: list[tuple[int, int]] = []  # (acc, coef) saved at each "("
    while True:
        # The tree: VAL choices in leftmost (pre-)order. `size` counts the characters
        # the EQs decided so far will emit (an OP, maybe two parentheses); each VAL
        # still open will emit at least one more.
        r = rnd() * 0.46  # the start symbol is EQ: a VAL forced into its EQ branch
        rs.clear()
        push(r)
        size = 3 if r < 0.23 else 1
        open_vals = 2
        while open_vals:
            r = rnd()
            push(r)
            if r < 0.46:
                open_vals += 1
                size += 3 if r < 0.23 else 1
                if size + open_vals > max_in:
                    break
            else:
                open_vals -= 1
                size += 1
        if open_vals:
            yield None
            continue

        # The text and value, walking the tree; only number tails still draw.
        s = ""
        acc, coef = 0, 1
        last = ""  # the character before the next number: it decides the sign folding
        for r in rs:
            if r < 0.46:
                f = eq_codes[int(r * 10000)]
                if f & 4:
                    s += "("
                    last = "("
                    levels.append((acc, coef))
                    acc, coef = 0, 1
                frames.append(f)
                continue

            if r < 0.487:
                s += "0"
                term = 0
            else:
                text, v, more = heads[int((r - 0.487) * (900 / 0.513))]
                if more:  # rare: NUMT keeps going, one draw per further digit
                    r = rnd()
                    if r >= 0.8:
                        mag = abs(v)
                        while r >= 0.8:
                            mag = mag * 10 + int((r - 0.8) * 50)
                            r = rnd()
                        v = mag if v > 0 else -mag
                        text = str(v)
                if v < 0:
                    if last == "-":
                        s = s[:-1] + "+" + text[1:]
                    elif last == "+":
                        s = s[:-1] + text
                    else:
                        s += text
                else:
                    s += text
                term = coef * v

            # Finish every EQ this number completes, up to the next one due an OP.
            while frames:
                f = frames.pop()
                if f == 0:
                    s += ")"
                    v = acc + term
                    acc, coef = levels.pop()
                    term = coef * v
                    continue
                op = f & 3
                if op == 1:
                    s += "+"
                    last = "+"
                    acc += term
                    coef = 1
                elif op == 2:
                    s += "-"
                    last = "-"
                    acc += term
                    coef = -1
                else:
                    s += "*"
                    last = "*"
                    coef = term
                if f & 4:
                    frames.append(0)
                break
        yield (s, acc + term) if len(s) <= max_in else None


def sample(rng: random.Random, max_in: int) -> tuple[str, int] | None:
    """One draw of the grammar: (folded problem, exact value), or None if it outgrew max_in."""
    return next(_draws(rng, max_in))


def _chunk_seed(stream: str, seed: int, chunk: int) -> int:
    # A hash, not seed + chunk: neighbouring seeds and streams must not share chunks.
    digest = hashlib.sha256(f"{stream}\0{seed}\0{chunk}".encode()).digest()
    return int.from_bytes(digest[:16], "big")


def _run_chunk(chunk: int, *, seed: int, stream: str, chunk_size: int,
               min_in: int, max_in: int, min_out: int, max_out: int) -> dict[str, str]:
    """Accepted draws of one chunk as {problem: answer}, in order of first occurrence."""
    rng = random.Random(_chunk_seed(stream, seed, chunk))
    found: dict[str, str] = {}
    for draw in islice(_draws(rng, max_in), chunk_size):
        if draw is not None and len(draw[0]) >= min_in:
            answer = str(draw[1])
            if min_out <= len(answer) <= max_out:
                # Re-assigning a duplicate keeps its first position (and the same answer).
                found[draw[0]] = answer
    return found


def generate_unique(n: int, *, seed: int, stream: str, min_in: int, max_in: int,
                    min_out: int, max_out: int, workers: int = 2, chunk_size: int = 1 << 15,
                    progress: Callable[[int], object] | None = None,
                    patience: int = 50) -> tuple[list[str], list[str]]:
    """The first n unique accepted (problem, answer) pairs of the draw sequence.

    Draws come in chunks of ``chunk_size`` draws; chunk k has its own rng seeded from
    (stream, seed, k), so the result depends on (seed, stream, chunk_size, bounds) only,
    never on ``workers`` or the machine: changing chunk_size changes the pool. Chunks
    run in a pool of ``workers`` processes (in-process for 1) and are merged in chunk
    order, keeping each problem's first occurrence. ``progress(k)`` is called after
    each chunk with the k problems it added. Raises ValueError once ``patience``
    consecutive chunks add nothing new: the grammar cannot meet the request.
    """
    if n < 0 or min_in > max_in or min_out > max_out or chunk_size < 1 or workers < 1:
        raise ValueError(f"bad request: n={n} in=[{min_in},{max_in}] out=[{min_out},{max_out}] "
                         f"chunk_size={chunk_size} workers={workers}")
    run = partial(_run_chunk, seed=seed, stream=stream, chunk_size=chunk_size,
                  min_in=min_in, max_in=max_in, min_out=min_out, max_out=max_out)
    # dict.update keeps the first position of a repeated problem: an ordered set merge in C.
    pool: dict[str, str] = {}

    def merge(results) -> None:
        stale = 0
        for k, found in enumerate(results):
            before = len(pool)
            pool.update(found)
            new = min(len(pool), n) - before
            if progress is not None:
                progress(new)
            if len(pool) >= n:
                return
            stale = 0 if new else stale + 1
            if stale >= patience:
                raise ValueError(
                    f"only {len(pool)} of {n} unique problems with lengths {min_in}..{max_in} "
                    f"and answers {min_out}..{max_out} chars: none new in the last {patience} "
                    f"chunks ({k + 1} chunks drawn)")

    if n == 0:
        return [], []
    if workers == 1:
        merge(map(run, count()))
    else:
        # Leaving the with-block terminates the pool: chunks still queued are dropped.
        with multiprocessing.Pool(workers) as procs:
            merge(procs.imap(run, count()))
    return list(islice(pool, n)), list(islice(pool.values(), n))
