"""The abacus decoder and the looped task's encoders: counts at the source's sizes, loops,
masks, offsets, progressive loss, batched decoding. (Shapes, causality, gradients and decoding
of every model: test_model_contract.)"""

import pytest
import torch

from arithrepro.decoding import greedy_decode
from arithrepro.models.lm import count_params
from arithrepro.tasks.abacus import VOCAB
from tests.helpers import brute_force, build

# The abacus decoder at width 32 (the fields a profile's budget sets: d_model, d_ff, heads,
# offset_k), and the looped notebook's encoders.
ABACUS = {"block_layers": 1, "recurrences": 4, "d_model": 32, "d_ff": 64, "heads": 4,
          "offset_k": 8}
NOTEBOOK = {"standard": {"d_model": 128, "d_ff": 2048, "layers": 4, "heads": 4},
            "looped": {"d_model": 128, "d_ff": 512, "heads": 4, "loop_offset": 4}}


def abacus(**fields):
    """The abacus decoder at ABACUS, with `fields` replaced."""
    return build("abacus", {**ABACUS, **fields})


def block_params(d, d_ff):
    return 4 * (d * d + d) + 2 * 2 * d + (d * d_ff + d_ff) + (d_ff * d + d)


def test_parameter_counts():
    d = 128
    head, embed = d * 10 + 10, 2 * 10 * d + d
    # nn.TransformerEncoder's layers at d_ff 2048 and no final LayerNorm, the one-hot embedding
    # (the source's two raw inputs would be 18 d fewer: 2,386,570)
    standard = count_params(build("standard", NOTEBOOK["standard"]))
    assert standard == embed + 100 * d + 4 * block_params(d, 2048) + head == 2_388_874
    # One shared block, plus the per-head bias of the two attention offsets and a final norm.
    assert count_params(build("looped", NOTEBOOK["looped"])) == embed + block_params(d, 512) + 4 * 2 + 2 * d + head
    m = abacus(block_layers=2, recurrences=3)
    positions = max(8 - 1 + 6, 12) + 1
    # no final LayerNorm; a head with bias
    assert count_params(m) == 15 * 32 + positions * 32 + 2 * block_params(32, 64) + 32 * 15 + 15


def test_encoders_loop_count():
    looped = build("looped", NOTEBOOK["looped"])
    calls = []
    looped.core.blocks[0].register_forward_hook(lambda *a: calls.append(1))
    looped(torch.randint(0, 10, (2, 13, 2)))
    assert len(calls) == 13 + 4  # positions + loop_offset = L + 5 for L = 12 digits
    calls.clear()
    standard = build("standard", NOTEBOOK["standard"])
    for b in standard.core.blocks:
        b.register_forward_hook(lambda *a: calls.append(1))
    standard(torch.randint(0, 10, (2, 13, 2)))
    assert len(calls) == 4


def test_looped_extra_loops_vary_in_training_only():
    looped = build("looped", {**NOTEBOOK["looped"], "extra_loops": 3})
    calls = []
    looped.core.blocks[0].register_forward_hook(lambda *a: calls.append(1))
    x = torch.randint(0, 10, (2, 9, 2))
    counts = set()
    for _ in range(40):
        calls.clear()
        looped(x)
        counts.add(len(calls))
    assert counts == {13, 14, 15, 16}  # 9 positions + 4, then 0..3 more
    looped.eval()
    for _ in range(5):
        calls.clear()
        looped(x)
        assert len(calls) == 13


def test_looped_attention_moves_one_position_per_loop():
    """With window {i-1, i}, position i after k loops depends on positions i-k..i only."""
    model = build("looped", NOTEBOOK["looped"]).eval()
    model.loop_offset = None  # a fixed loop count for this test
    model.core.recurrences = 3
    x = torch.randint(0, 10, (2, 12, 2))
    y = x.clone()
    y[:, 8] = (y[:, 8] + 1) % 10
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :8], b[:, :8])      # nothing flows right to left
    assert not torch.allclose(a[:, 8:11], b[:, 8:11])   # 3 loops reach positions 8..11
    z = x.clone()
    z[:, 0] = (z[:, 0] + 1) % 10
    with torch.no_grad():
        c = model(z)
    torch.testing.assert_close(a[:, 4:], c[:, 4:])      # position 0 reaches 1..3 only


def test_standard_model_refuses_lengths_beyond_its_positions():
    with pytest.raises(ValueError, match="101 positions exceed the 100 learned absolute positions"):
        build("standard", NOTEBOOK["standard"])(torch.zeros(1, 101, 2, dtype=torch.long))


def test_progressive_exit_equals_a_shorter_run():
    m = abacus(recurrences=5).eval()
    x = torch.randint(0, 15, (3, 10))
    with torch.no_grad():
        full, early = m.progressive(x, 2)
        torch.testing.assert_close(full, m(x))
        m.core.recurrences = 2
        torch.testing.assert_close(early, m(x))
        assert len(m.progressive(x, 2)) == 1  # n = R: the full loss only


def test_input_injection_adds_the_embedded_input_at_each_recurrence():
    m = abacus(recurrences=2).eval()
    x = torch.randint(0, 15, (2, 7))
    seen = []
    m.core.blocks[0].register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))
    with torch.no_grad():
        m(x)
        e = m._embed(x, None)
        after_first = m.core.blocks[0](e)
    torch.testing.assert_close(seen[0], e)
    torch.testing.assert_close(seen[1], after_first + e)


def test_abacus_cached_decoding_equals_recomputation():
    """Batched prompts of different lengths: each sample's digit-run positions carry on through
    the cache as a full forward would number them."""
    m = abacus(recurrences=3).eval()
    tokens = torch.randint(0, 15, (6, 14))
    plen = torch.tensor([5, 7, 7, 9, 10, 12])
    got = greedy_decode(m, tokens, plen, 6, VOCAB.index("$"))
    want = [brute_force(m, tokens[i, :plen[i]], 6, VOCAB.index("$")) for i in range(6)]
    assert got.tolist() == want


def test_training_offsets_are_random_and_evaluation_offsets_zero():
    m = abacus(offset_k=50)
    tok = torch.tensor([[1, 2, 3, 11, 4, 5, 13]] * 8)
    m.train()
    torch.manual_seed(0)
    p = m.positions.positions(tok)
    assert (p[:, 3] == 0).all() and (p[:, 6] == 0).all()
    assert len(set(p[:, 0].tolist())) > 1                  # per-sample offsets
    assert ((p[:, 1] - p[:, 0]) == 1).all()
    m.eval()
    assert m.positions.positions(tok)[0].tolist() == [1, 2, 3, 0, 1, 2, 0]


def test_too_long_digit_runs_fail_clearly():
    m = abacus().eval()
    with pytest.raises(ValueError, match="exceeds the Abacus embedding"):
        m(torch.full((1, 20), 3))
