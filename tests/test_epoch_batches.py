"""An epoch's batches: whole batches of a seeded order, the rows left over carried by a later
epoch's order, never a step on a few rows of their own."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arithrepro.batches import EpochBatches


def rows(n, batch_size, epochs=3, seed=7):
    b = EpochBatches(lambda idx: idx, n, batch_size, epochs, seed, "cpu")
    return b, [b(step) for step in range(b.steps)]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), batch_size=st.integers(1, 300))
def test_every_step_trains_a_whole_batch_or_the_whole_split(n, batch_size):
    b, batches = rows(n, batch_size)
    assert b.per_epoch == max(1, n // batch_size)
    assert {len(x) for x in batches} == {min(n, batch_size)}
    for e in range(3):   # within an epoch no row twice, and an epoch ends on its last batch
        seen = torch.cat(batches[e * b.per_epoch:(e + 1) * b.per_epoch])
        assert len(set(seen.tolist())) == len(seen)
        assert b.epoch_end((e + 1) * b.per_epoch - 1) and b.epoch((e + 1) * b.per_epoch) == e + 1


def test_the_rows_left_over_are_reached_by_later_orders():
    # 769 = 3 x 256 + 1: modular's cpu training set at batch 256
    b, batches = rows(769, 256, epochs=8)
    assert b.per_epoch == 3 and all(len(x) == 256 for x in batches)
    assert set(torch.cat(batches).tolist()) == set(range(769))


def test_a_split_that_divides_keeps_its_batches():
    # the order and the batches are the plain ones where nothing is left over (expr's 65,536 at 64)
    b, batches = rows(512, 64, epochs=2, seed=3)
    for e in range(2):
        order = torch.randperm(512, generator=torch.Generator().manual_seed(3 * 100_003 + e))
        assert torch.equal(torch.cat(batches[e * 8:(e + 1) * 8]), order)
