"""A batch split into length-sorted micro-batches gives the whole batch's loss and gradients."""

import numpy as np
import pytest
import torch

from arithrepro.models.registry import MODELS, build_model
from arithrepro.tasks.expr import PAD, TASK, Split, encode
from arithrepro.tasks.expr_grammar import generate_unique
from arithrepro.train.micro import micro_batches
from arithrepro.train.losses import training_loss

SIZES = {"gpt": {"d_model": 16, "d_ff": 32, "d_sa": 16, "layers": 2, "heads": 4},
         "lstm": {"d_model": 8, "d_ff": 16, "layers": 2},
         "retran": {"d_model": 8, "d_ff": 16, "d_sa": 8, "layers": 2, "heads": 2}}


def batch(n=48, seed=0):
    problems, answers = generate_unique(n, seed=seed, stream="pool", min_in=3, max_in=14,
                                        min_out=0, max_out=3, workers=1)
    ids = torch.from_numpy(encode(problems, answers, 20).astype(np.int64))
    eq = torch.from_numpy(np.char.str_len(np.asarray(problems, dtype=str)).astype(np.int64)) + 1
    return TASK.batch(Split(ids, eq, eq - 1), torch.arange(n))


def gradients(net, pieces, count):
    net.zero_grad()
    total = 0.0
    for x, y, mask, start in pieces:
        loss = training_loss(net, x, y, mask, outputs_from=start, count=count)
        loss.backward()
        total += float(loss.detach())
    return total, {k: p.grad.clone() for k, p in net.named_parameters()}


@pytest.mark.parametrize("name", sorted(SIZES))
@pytest.mark.parametrize("pieces", [2, 5])
def test_pieces_give_the_whole_batchs_loss_and_gradients(name, pieces):
    torch.manual_seed(0)
    net = build_model(name, SIZES[name], vocab_size=19, dropout=0.0, max_len=24, pad_id=PAD).double()
    x, y, mask = batch()
    trim = MODELS[name].prunes_outputs
    split = micro_batches(x, y, mask, pieces, trim)
    assert len(split) == pieces and sum(len(p[0]) for p in split) == len(x)
    assert all(p[0].size(1) < x.size(1) for p in split[1:])  # padding was cut
    assert any(p[3] > 0 for p in split) == trim
    count = mask.sum()
    whole, g_whole = gradients(net, micro_batches(x, y, mask, 1), count)
    parts, g_parts = gradients(net, split, count)
    assert parts == pytest.approx(whole, rel=1e-10)
    for k in g_whole:
        torch.testing.assert_close(g_parts[k], g_whole[k], rtol=1e-9, atol=1e-12, msg=k)


def test_pieces_keep_every_scored_position():
    x, y, mask = batch(37, seed=3)
    kept = sum(int(m.sum()) for _, _, m, _ in micro_batches(x, y, mask, 4, True))
    assert kept == int(mask.sum())
    for xp, _, mp, start in micro_batches(x, y, mask, 4, True):
        assert mp[:, :start].sum() == 0 and mp[:, -1].any()
