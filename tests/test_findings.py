"""Each task's findings checked on made-up records: one that holds, one that does not
(arithrepro/findings.py; the checks live with their tasks)."""

import pandas as pd
import pytest

from arithrepro.findings import verdicts
from arithrepro.tasks.registry import TASKS


def check(task: str, rows: list[dict], params: dict | None = None) -> list:
    """[holds] of each of the task's findings."""
    return [v["holds"] for v in verdicts(TASKS[task].findings, pd.DataFrame(rows), params or {})]


def expr_rows(gpt=0.2, lstm=0.5, retran=0.6, ood=0.1):
    return [{"task": "expr", "model": m, "size": s, "seed": seed, "test_acc": acc + 0.01 * seed,
             "ood_acc": ood}
            for m, acc in (("gpt", gpt), ("lstm", lstm), ("retran", retran))
            for s in ("small", "medium") for seed in range(3)]


def test_expr():
    assert check("expr", expr_rows()) == [True, True, True]
    # the LSTM above ReTran; GPT below 10 %; OOD above test for GPT
    assert check("expr", expr_rows(gpt=0.05, lstm=0.7, ood=0.08)) == [False, False, False]


def abacus_rows(ood):
    return [{"task": "abacus", "model": "abacus", "size": "l2r2", "seed": i, "id_acc": 0.99,
             "ood_acc": v} for i, v in enumerate(ood)]


def test_abacus_needs_the_mean_and_every_seed():
    assert check("abacus", abacus_rows([0.9, 0.7, 0.5])) == [True, True]
    assert check("abacus", abacus_rows([0.95, 0.9, 0.39])) == [True, False]   # mean 0.75, one low
    assert check("abacus", abacus_rows([0.55, 0.6, 0.6])) == [True, False]    # every seed, low mean


LOOPED = {"looped": {"data": {"train_digits": 8, "eval_digits": [8, 12, 16]}}}


def looped_rows(looped12=0.9, standard16=0.0):
    rows = []
    for seed in range(2):
        rows.append({"task": "looped", "model": "looped", "size": "notebook", "seed": seed,
                     "acc_len8": 1.0, "acc_len12": looped12, "acc_len16": 0.5})
        rows.append({"task": "looped", "model": "standard", "size": "notebook", "seed": seed,
                     "acc_len8": 1.0, "acc_len12": 0.0, "acc_len16": standard16})
    return rows


def test_looped_every_length_past_training_every_seed():
    assert check("looped", looped_rows(), LOOPED) == [True, True]
    # at 16 digits the standard encoder leads; at 12 the looped one is below 80 %
    assert check("looped", looped_rows(looped12=0.7, standard16=0.6), LOOPED) == [False, False]


def sanity_rows(fallback_gpt):
    """Records as the task writes them: no val_fallback where A_val never reached 0.99."""
    rows = [{"task": "modular", "model": m, "size": "sanity", "seed": seed, "val_acc": 1.0,
             "dt_acc_steps": 300, "train_acc_last": 1.0, "val_acc_step": 900, "train_acc": 1.0,
             "val_fallback": fallback_gpt if m == "gpt-sin" else 0.0, "param_norm": 30.0}
            for m in ("lstm-std", "gpt-sin") for seed in (0, 42)]
    for r in rows:
        if r["val_fallback"] is None:
            del r["val_fallback"]
            r["val_acc"] = 0.9
    return rows


@pytest.mark.parametrize("fallback,holds", [(0.0, True), (0.2, True), (0.5, False), (None, False)])
def test_modular_sanity_allows_a_fall_of_at_most_two_tenths(fallback, holds):
    assert check("modular", sanity_rows(fallback))[0] is holds


def test_modular_sanity_where_no_run_reached_099():
    rows = [r for r in sanity_rows(None) if r["model"] == "gpt-sin"]
    v = verdicts(TASKS["modular"].findings, pd.DataFrame(rows), {})[0]
    assert v["holds"] is False and "A_val never reached 0.99" in v["measured"]


def test_modular_studies_without_runs_cannot_say():
    assert check("modular", sanity_rows(0.0))[1:] == [None, None, None, None]


def charlm_rows(gap):
    return [{"task": "charlm", "model": m, "size": "s20", "seed": seed,
             "final_val_loss": base + 0.01 * seed}
            for m, base in (("rnn", 1.6 + gap), ("gru", 1.6)) for seed in range(3)]


def test_charlm_gap_beyond_the_spread():
    assert check("charlm", charlm_rows(0.1)) == [True]
    assert check("charlm", charlm_rows(0.01)) == [False]   # spread 0.02


def test_a_record_without_the_metric_cannot_say():
    rows = abacus_rows([0.9])
    del rows[0]["ood_acc"]
    v = verdicts(TASKS["abacus"].findings, pd.DataFrame(rows), {})[1]
    assert v["holds"] is None and v["measured"] == "the records have no ood_acc"


@pytest.mark.parametrize("holds, n, word", [
    (True, 5, "yes"), (False, 3, "**no**"), (None, 0, "–"),
    (True, 1, "yes on one seed: a draw, not a finding"),
    (False, 2, "**no** on 2 seeds: a draw, not a finding")])
def test_a_verdict_on_too_few_seeds_reads_as_a_draw(holds, n, word):
    from arithrepro.findings import verdict_word

    assert verdict_word({"holds": holds, "n": n}) == word
