"""Batched cached greedy decoding equals one-sample-at-a-time decoding without any cache; the
sampler's greedy rule equals greedy decoding."""

import pytest
import torch

from arithrepro.decoding import accuracy_by, greedy_decode, sample

from tests.helpers import LM_NAMES, brute_force, build


@pytest.mark.parametrize("name", LM_NAMES)
def test_greedy_decode_matches_brute_force(name):
    torch.manual_seed(1)
    model = build(name, "small", max_len=40).eval()
    B, W, max_new = 12, 24, 6
    tokens = torch.randint(4, 19, (B, W))
    tokens[:, 0] = 0
    plen = torch.randint(3, 16, (B,))
    # An untrained model rarely says <stop>: call "stop" a token it does produce mid-answer, so
    # that samples finish at different steps.
    stop = int(greedy_decode(model, tokens, plen, max_new, stop_id=1)[0, 2])
    got = greedy_decode(model, tokens, plen, max_new, stop)
    want = [brute_force(model, tokens[i, :plen[i]], max_new, stop) for i in range(B)]
    assert got.tolist() == want
    finished = (got == stop).int().argmax(1)
    assert finished.min() < max_new - 1, "the test should exercise early stopping"


@pytest.mark.parametrize("name", LM_NAMES)
def test_greedy_sampling_is_greedy_decoding(name):
    """sample(greedy=True) takes the argmax at every step, whatever the temperature, and draws
    nothing from the generator."""
    torch.manual_seed(2)
    model = build(name, "small", max_len=40).eval()
    prompt = torch.randint(4, 19, (5,))
    g = torch.Generator().manual_seed(0)
    got = sample(model, prompt, 20, 0.3, g, context=40, greedy=True)
    want = greedy_decode(model, prompt.view(1, -1), torch.tensor([5]), 20, stop_id=-1)[0]
    assert got.tolist() == want.tolist() == brute_force(model, prompt, 20, stop=-1)
    assert torch.equal(g.get_state(), torch.Generator().manual_seed(0).get_state())


def test_a_finished_sample_reads_stop():
    """After its budget or its <stop>, a sample reads <stop>, not its own predictions: an abacus
    model that says only digits, in a batch whose prompts differ in length, would otherwise
    grow a digit run past its position table."""
    from arithrepro.tasks.abacus import END, sample as abacus_sample

    size = {"block_layers": 1, "recurrences": 2, "d_model": 8, "d_ff": 16, "heads": 2, "offset_k": 1}
    # positions for runs of 9 digits at most: the answers here have 2 and 9
    model = build("abacus", size, max_len=60, train_run=9, eval_run=9).eval()
    with torch.no_grad():  # every prediction the digit 7
        model.head.weight.zero_()
        model.head.bias.zero_()
        model.head.bias[7] = 1.0
    n1 = torch.tensor([1, 1, 8, 8])
    tokens, eq, _ = abacus_sample(n1, n1, torch.Generator().manual_seed(0))
    # budgets of 3 in a batch whose longest prompt is 14 tokens longer than its shortest
    out = greedy_decode(model, tokens, eq + 1, 3, END)
    assert out.tolist() == [[7, 7, 7]] * 4
    assert model.positions.max_position == 9


def test_accuracy_by_groups():
    correct = torch.tensor([True, False, True, True, False])
    lengths = torch.tensor([8, 8, 9, 10, 10])
    rows = accuracy_by(correct, lengths)
    assert rows == [
        {"length": 8, "n": 2, "correct": 1, "accuracy": 0.5},
        {"length": 9, "n": 1, "correct": 1, "accuracy": 1.0},
        {"length": 10, "n": 2, "correct": 1, "accuracy": 0.5},
    ]
