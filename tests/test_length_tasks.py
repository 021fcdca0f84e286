"""The abacus and looped generators, positions, masks and scoring."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arithrepro.models.abacus import abacus_positions
from arithrepro.tasks import abacus as ab
from arithrepro.tasks import looped as lp


def as_int(digits) -> int:
    """Least-significant-first digits -> int."""
    return int("".join(str(d) for d in reversed(list(digits))) or "0")


def parse(tokens) -> tuple[str, str, str]:
    text = "".join(ab.VOCAB[t] for t in tokens)
    problem, rest = text.split("=", 1)
    a, b = problem.split("+")
    return a, b, rest[:rest.index("$")]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(0, 2**31 - 1), st.integers(1, 16))
def test_every_abacus_sample_is_a_true_sum(max_digits, seed, n):
    g = torch.Generator().manual_seed(seed)
    n1, n2 = (torch.randint(1, max_digits + 1, (n,), generator=g) for _ in range(2))
    tokens, eq, end = ab.sample(n1, n2, g)
    for i in range(n):
        a, b, s = parse(tokens[i].tolist())
        assert (len(a), len(b)) == (n1[i].item(), n2[i].item())   # exactly n digits
        assert len(a) == 1 or a[-1] != "0"                          # no leading zero (reversed)
        assert int(a[::-1]) + int(b[::-1]) == int(s[::-1])
        assert s == str(int(a[::-1]) + int(b[::-1]))[::-1]          # no padding zeros in the answer
        assert tokens[i, eq[i]] == ab.EQ and tokens[i, end[i]] == ab.END
        assert (tokens[i, end[i]:] == ab.PAD).all()


def test_operand_lengths_are_uniform_and_one_digit_includes_zero():
    g = torch.Generator().manual_seed(0)
    a, _ = ab.sample_operands(torch.ones(5000, dtype=torch.long), torch.ones(5000, dtype=torch.long), 1, g)
    assert set(a[:, 0].tolist()) == set(range(10))
    a, _ = ab.sample_operands(torch.full((5000,), 3), torch.full((5000,), 3), 3, g)
    assert a[:, 2].min() == 1 and a[:, 2].max() == 9


def test_loss_mask_covers_answer_and_end_only():
    g = torch.Generator().manual_seed(1)
    tokens, eq, end = ab.sample(torch.tensor([3, 1]), torch.tensor([2, 4]), g)
    x, y, mask = ab.AbacusTask.lm_batch(tokens, eq, end)
    for i in range(2):
        targets = "".join(ab.VOCAB[t] for t in y[i][mask[i]].tolist())
        _, _, s = parse(tokens[i].tolist())
        assert targets == s + "$"


def brute_positions(is_digit: list[bool]) -> list[int]:
    out, run = [], 0
    for d in is_digit:
        run = run + 1 if d else 0
        out.append(run)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=12, max_size=12), min_size=1, max_size=6),
       st.integers(1, 11))
def test_abacus_positions_match_brute_force_also_in_chunks(rows, cut):
    d = torch.tensor(rows)
    want = [brute_positions(r) for r in rows]
    assert abacus_positions(d).tolist() == want
    run = torch.zeros(len(rows), dtype=torch.long)
    first = abacus_positions(d[:, :cut], run)
    run = first[:, -1].clone()
    second = abacus_positions(d[:, cut:], run)
    assert torch.cat([first, second], 1).tolist() == want


def digits(text: str) -> list[int]:
    return [ab.VOCAB.index(c) for c in text]


@pytest.mark.parametrize("generated,budget,ok", [
    ("21$", 4, True),        # 12 + 0 = 12, reversed "21"
    ("210$", 4, True),       # a trailing zero of the reversed answer is still 12
    ("22$", 4, False),
    ("21", 4, False),        # no end token
    ("2+1$", 4, False),      # not digits
    ("$", 4, False),         # no digits at all
    ("2100$", 4, False),     # `$` beyond the budget of max(n1, n2) + 2 tokens
])
def test_correctness_rule(generated, budget, ok):
    tokens = torch.tensor([digits("21+0=21$$$$")])
    eq, end = torch.tensor([4]), torch.tensor([7])
    gen = torch.tensor([digits(generated) + [5] * (6 - len(generated))])  # after `$`: ignored
    assert ab.AbacusTask.correct(gen, tokens, eq, end, torch.tensor([budget])).item() is ok


def test_decimal_text_round_trip():
    g = torch.Generator().manual_seed(3)
    n = torch.tensor([1, 1, 4, 7])
    a, _ = ab.sample_operands(n, n, 7, g)
    text = ab.digits_to_text(a)
    assert [len(t) for t in text] == [1, 1, 4, 7]
    back, count = ab.text_to_digits(text, 7)
    assert (torch.from_numpy(back) == a).all() and count.tolist() == [1, 1, 4, 7]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 30), st.integers(0, 2**31 - 1), st.sampled_from(["decimal", "binary"]))
def test_looped_targets_are_the_sum_digits(L, seed, variant):
    base = 10 if variant == "decimal" else 2
    g = torch.Generator().manual_seed(seed)
    a, b = lp.sample_pairs(8, L, base, g)
    x, y = lp.pairs_and_targets(a, b, base, carry_position=variant == "decimal")
    assert x.shape[1] == y.shape[1] == (L + 1 if variant == "decimal" else L)
    for i in range(8):
        A = sum(int(v) * base**k for k, v in enumerate(a[i]))
        B = sum(int(v) * base**k for k, v in enumerate(b[i]))
        S = sum(int(v) * base**k for k, v in enumerate(y[i]))
        assert S == (A + B if variant == "decimal" else (A + B) % base**L)
        assert x[i, :L, 0].tolist() == a[i].tolist() and x[i, :L, 1].tolist() == b[i].tolist()


def test_looped_text_round_trip():
    d = np.array([[1, 0, 0, 3], [0, 0, 0, 0]])
    assert lp._text(d).tolist() == ["3001", "0000"]
    assert (lp._digits(lp._text(d), 4) == d).all()


def test_abacus_scores_each_recurrence_count_at_that_count(tmp_path, smoke_params, monkeypatch):
    """The model decodes at each count it is scored at, whatever other counts are evaluated
    beside it, and keeps its trained count after."""
    import arithrepro.decoding
    from tests.helpers import CONTRACT_SIZES, build

    ab.TASK.generate(smoke_params, tmp_path)
    model = build("abacus", CONTRACT_SIZES["abacus"], **ab.TASK.dims(smoke_params)).eval()
    trained, ran_at = model.recurrences, []
    decode = arithrepro.decoding.decode_split

    def recording(net, *args, **kwargs):
        ran_at.append(net.recurrences)
        return decode(net, *args, **kwargs)

    monkeypatch.setattr(arithrepro.decoding, "decode_split", recording)
    for counts in ([1, trained, 2 * trained], [trained], [2 * trained, 1]):
        smoke_params["abacus"]["eval"]["recurrences"] = counts
        ran_at.clear()
        _, rows = ab.TASK.evaluate(model, smoke_params, tmp_path, "cpu")
        scored = sorted({*counts, trained})
        assert ran_at == scored and sorted({row["recurrences"] for row in rows}) == scored
        assert model.recurrences == trained
