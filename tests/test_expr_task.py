"""Tokenization, loss masks and exact-match scoring of the expr task."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arithrepro.tasks.expr import EQ, PAD, START, STOP, TASK, VOCAB, decode, encode
from tests.helpers import split_of

problems = st.text(alphabet="0123456789+-*()", min_size=1, max_size=30)
answers = st.text(alphabet="-0123456789", min_size=1, max_size=5)


def test_vocabulary_order_is_the_sources():
    assert VOCAB[:4] == ["<start>", "=", "<stop>", "<pad>"]
    assert VOCAB[4:] == list("0123456789-+*()")
    assert len(VOCAB) == 19


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(problems, answers), min_size=1, max_size=8))
def test_encode_decode_round_trip(pairs):
    ids = encode([p for p, _ in pairs], [a for _, a in pairs], 38)
    assert ids.shape == (len(pairs), 38)
    for row, (p, a) in zip(ids, pairs):
        assert row[0] == START
        assert decode(row) == f"<start>{p}={a}<stop>"
        assert (row[len(p) + len(a) + 3:] == PAD).all()


def test_encode_rejects_overlong_and_foreign_characters():
    with pytest.raises(ValueError, match="width"):
        encode(["1+2"], ["3"], 6)
    with pytest.raises(ValueError, match="vocabulary"):
        encode(["1/2"], ["0"], 10)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(problems, answers), min_size=1, max_size=6))
def test_answer_mask_covers_answer_and_stop_only(pairs):
    split = split_of(pairs)
    idx = torch.arange(len(pairs))
    x, y, mask = TASK.batch(split, idx, "answer")
    for i, (p, a) in enumerate(pairs):
        assert [VOCAB[t] for t in y[i][mask[i]].tolist()] == list(a) + ["<stop>"]
        assert x[i, mask[i].nonzero()[0, 0]] == EQ  # the first supervised input is '='
    _, y_all, mask_all = TASK.batch(split, idx, "all")
    assert torch.equal(mask_all, y_all != PAD)


def test_score_is_exact_match_including_stop():
    split = split_of([("1+2", "3"), ("10*10", "100"), ("2-5", "-3"), ("7", "7")])
    S = STOP

    def ids(text):
        return [VOCAB.index(ch) for ch in text]

    generated = torch.tensor([
        ids("3") + [S, S, S, S, S],        # right
        ids("10") + [S, S, S, S],          # stops early: wrong
        ids("-3") + [4, 4, 4, 4],          # no <stop> after the answer: wrong
        ids("7") + [S, 5, 5, 5, 5],        # right; what follows <stop> does not count
    ])
    assert TASK.score(split, generated).tolist() == [True, False, False, True]


def test_the_length_range_sizes_the_model_and_is_checked(params):
    from arithrepro import config

    paper = config.compose(["profile=paper"])["expr"]["data"]
    assert (paper["min_in"], paper["max_in"], paper["max_out"]) == (8, 30, 5)  # the source's
    p = params  # a copy of its own
    p["expr"]["data"].update(max_in=12, ood_min_in=13, ood_max_in=16)
    cpu = p["expr"]["data"]
    assert TASK.dims(p)["max_len"] == 16 + cpu["max_out"] + 3
    assert TASK.generate_count(p) == sum(cpu[k] for k in ("n_train", "n_valid", "n_test", "n_ood"))
    p["expr"]["data"]["ood_min_in"] = 12
    with pytest.raises(config.ParamsError, match=r"expr\.data\.ood_min_in = 12: expected > "):
        config.validate(p)
