"""`arithrepro exps`: experiments side by side, only the params that differ and the headline
metrics, within the width asked for."""

from arithrepro.exps import experiments, flatten, render, rows


def _entry(name, params, headline, rev="a" * 40):
    return {"rev": rev, "name": name, "data": {
        "rev": rev, "params": {"params.yaml": {"data": params}},
        "metrics": {"metrics/headline.json": {"data": headline}}}}


def _params(lr=0.01, seeds=(0, 1, 2), profile="cpu"):
    return {"profile": profile, "device": "auto",
            "expr": {"seeds": list(seeds), "train": {"epochs": 5}},
            "models": {"gpt": {"lr": lr, "sizes": {"small": {"d_model": 32}}}},
            "charlm": {"models": ["rnn", "gru"], "train": {"lr": 0.001}}}


HEADLINE = {"expr": {"gpt-medium": {"test_acc": 0.9123, "test_acc_std": 0.0123, "ood_acc": 0.25}},
            "charlm": {"rnn-s20": {"final_bpc": 2.2}}}


def shown():
    base = _entry("workspace", _params(), HEADLINE, rev="workspace")
    base["experiments"] = [{"revs": [_entry("fast-gpt", _params(lr=0.02), HEADLINE)]},
                           {"revs": [_entry("two-seeds", _params(seeds=(0, 1)), {})]}]
    return [base]


def test_only_what_differs_and_the_headline():
    exps = experiments(shown())
    assert [e.name for e in exps] == ["workspace", "fast-gpt", "two-seeds"]
    table = dict(rows(exps))
    assert set(table) == {"models.gpt.lr", "expr.seeds", "expr.gpt-medium.test_acc",
                          "expr.gpt-medium.ood_acc", "charlm.rnn-s20.final_bpc"}
    assert table["models.gpt.lr"] == [0.01, 0.02, 0.01]
    assert table["expr.gpt-medium.test_acc"][0] == (0.9123, 0.0123)  # mean and std together
    assert table["charlm.rnn-s20.final_bpc"][2] is None


def test_a_task_view_keeps_its_own_keys():
    exps = experiments(shown())
    assert set(dict(rows(exps, "charlm"))) == {"charlm.rnn-s20.final_bpc"}
    assert "models.gpt.lr" in dict(rows(exps, "expr"))


def test_the_table_fits_the_width():
    exps = experiments(shown())
    text = render(exps, rows(exps), width=60)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 60
    assert "fast-gpt" in lines[0] and "0.912±0.0123" in text and " - " in text + " "


def test_flatten():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": 2}) == {"a.b": 1, "a.c": [1, 2], "d": 2}


def test_unnamed_columns_read_workspace_or_a_short_hash():
    head = _entry(None, _params(), HEADLINE, rev="workspace")
    commit = _entry(None, _params(lr=0.02), HEADLINE, rev="0123456789abcdef" * 2 + "01234567")
    assert [e.name for e in experiments([head, commit])] == ["workspace", "0123456"]
