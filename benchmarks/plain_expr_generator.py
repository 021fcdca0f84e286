"""The plain expr generator: recursive expansion, answers by eval() of the finished string, a set
for dedup. It is the reference the fast generator (arithrepro.tasks.expr_grammar) is measured
(benchmarks/bench_generation.py) and tested (tests/test_expr_grammar.py) against: the same
distribution, not the same problems (it spends its random numbers differently).
"""

from __future__ import annotations

import random
from typing import Iterator


class _TooLong(Exception):
    pass


def _plain_draws(rng: random.Random, max_in: int) -> Iterator[str | None]:
    """Endless draws the straightforward way: recursive expansion into a list of
    characters, folding as characters are appended. The folded problem, or None if it
    outgrew max_in. (A generator only so the closures are made once, not per draw.)
    """
    rand = rng.random
    chars: list[str] = []

    def emit(c: str) -> None:
        if c == "-" and chars and chars[-1] in "+-":
            chars[-1] = "+" if chars[-1] == "-" else "-"
        else:
            chars.append(c)
        if len(chars) > max_in:
            raise _TooLong

    def eq() -> None:
        paren = rand() < 0.5
        if paren:
            emit("(")
        val()
        r = rand()
        emit("+" if r < 0.35 else "-" if r < 0.7 else "*")
        val()
        if paren:
            emit(")")

    def val() -> None:
        if rand() < 0.46:
            eq()
        else:
            num()

    def num() -> None:
        if rand() < 0.05:
            emit("0")
            return
        head = rng.randrange(18)
        if head >= 9:
            emit("-")
        emit(str(head % 9 + 1))
        while (r := rand()) >= 0.8:
            emit(str(int((r - 0.8) / 0.02)))

    while True:
        chars.clear()
        try:
            eq()
        except _TooLong:
            yield None
            continue
        yield "".join(chars)


def sample_plain(rng: random.Random, max_in: int) -> str | None:
    """One draw of the plain generator: the folded problem, or None if it outgrew max_in."""
    return next(_plain_draws(rng, max_in))


def generate_plain(n: int, *, seed: int, min_in: int, max_in: int, min_out: int,
                   max_out: int) -> tuple[list[str], list[str]]:
    """The plain single-process generator, kept as the speed baseline.

    `_plain_draws` draws, answers by eval() of the finished string, a set for dedup.
    Same distribution as `generate_unique` (not the same problems: it spends its random
    numbers differently). Loops forever on a request the grammar cannot meet.
    """
    draws = _plain_draws(random.Random(seed), max_in)
    problems: list[str] = []
    answers: list[str] = []
    seen: set[str] = set()
    while len(problems) < n:
        problem = next(draws)
        if problem is None or len(problem) < min_in or problem in seen:
            continue
        answer = str(eval(problem))  # noqa: S307 - our own alphabet: digits, + - * ( )
        if min_out <= len(answer) <= max_out:
            seen.add(problem)
            problems.append(problem)
            answers.append(answer)
    return problems, answers
