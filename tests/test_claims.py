"""The claims ledger (claims/<task>.yaml, arithrepro/claims.py): every file follows the schema,
every finding tests some claim of its source, and each way of testing a claim gives its verdict
from the records, the findings or a named target's file."""

import copy
import json

import pandas as pd
import pytest
import yaml

from arithrepro import claims
from arithrepro.findings.base import CLOSE, NOT_REPRODUCED, REPRODUCED, UNTESTED
from arithrepro.findings.registry import FINDINGS
from arithrepro.tasks.registry import TASKS


@pytest.mark.parametrize("task", list(TASKS))
def test_every_ledger_follows_the_schema_and_names_its_findings(task):
    ledger = claims.load(task)
    tested = {c["test"]["finding"] for c in ledger["claims"] if "finding" in c.get("test", {})}
    assert {f.id for f in FINDINGS[task]} <= tested, "a finding tests no claim of the source"
    judged = [c for c in ledger["claims"] if c["kind"] != "setting"]
    assert judged, "a source without claims"


LEDGER = {"source": {"file": "004", "task": "modular", "title": "t", "carries": "tables."},
          "claims": [
              {"id": "modular.a", "where": "Table 1", "claim": "A_val of the LSTM", "kind": "number",
               "reported": {"value": 1.0, "spread": 0.0}, "setting": "p 31",
               "test": {"metric": "val_acc", "cell": {"model": "lstm-std", "size": "sanity"},
                        "tolerance": 0.01, "tolerance_why": "rounding", "profiles": ["cpu"]}},
              {"id": "modular.b", "where": "Table 1", "claim": "memorize, then generalize",
               "kind": "trend", "setting": "p 31",
               "test": {"finding": "modular.late", "profiles": ["cpu"]}},
              {"id": "modular.c", "where": "§ 2", "claim": "0.25 s a step", "kind": "number",
               "setting": "Colab", "untested": {"why": "their hardware"}},
              {"id": "modular.d", "where": "§ 1", "claim": "AdamW", "kind": "setting",
               "setting": "lr 1e-3", "here": "modular.base.lr"},
              {"id": "modular.e", "where": "Table 1", "claim": "t_f(A_val) of the GPT",
               "kind": "number", "reported": {"value": 8400}, "setting": "p 31",
               "test": {"metric": "val_acc_step", "cell": {"model": "gpt-sin", "size": "sanity"},
                        "tolerance": 200, "tolerance_why": "the source's std",
                        "profiles": ["modular-source"]}}]}


def test_schema_errors_name_the_file_and_the_entry():
    claims.check(LEDGER, "claims/modular.yaml", "modular")
    bad = copy.deepcopy(LEDGER)
    del bad["claims"][0]["test"]["tolerance"]
    with pytest.raises(claims.LedgerError, match=r"claims/modular.yaml: claims\[0\] \(modular.a\): test.tolerance"):
        claims.check(bad, "claims/modular.yaml", "modular")
    bad = copy.deepcopy(LEDGER)
    bad["claims"][1]["test"]["finding"] = "modular.nope"
    with pytest.raises(claims.LedgerError, match="no such finding"):
        claims.check(bad, "claims/modular.yaml", "modular")
    bad = copy.deepcopy(LEDGER)
    bad["claims"][2]["test"] = bad["claims"][1]["test"]
    with pytest.raises(claims.LedgerError, match="exactly one of test, untested"):
        claims.check(bad, "claims/modular.yaml", "modular")
    bad = copy.deepcopy(LEDGER)
    bad["claims"][3]["id"] = "modular.a"
    with pytest.raises(claims.LedgerError, match="repeated"):
        claims.check(bad, "claims/modular.yaml", "modular")
    bad = copy.deepcopy(LEDGER)
    bad["claims"][0]["test"]["profiles"] = ["laptop"]
    with pytest.raises(claims.LedgerError, match="test.profiles"):
        claims.check(bad, "claims/modular.yaml", "modular")


def test_a_damaged_ledger_file_is_one_line(tmp_path):
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "modular.yaml").write_text("source: [unclosed\n")
    with pytest.raises(claims.LedgerError, match=r"claims/modular.yaml: not YAML"):
        claims.load("modular", tmp_path)


def rows(val_accs):
    return pd.DataFrame([{"task": "modular", "model": "lstm-std", "size": "sanity", "seed": s,
                          "val_acc": v} for s, v in enumerate(val_accs)])


RECORDED = [{"id": "modular.late", "outcome": CLOSE, "measured": "m", "n": 5, "test": "t"}]


def by_id(judged):
    return {v["id"]: v for v in judged}


def test_verdicts_by_metric_finding_untested_and_setting():
    judged = by_id(claims.verdicts(LEDGER, rows([0.999, 0.998, 1.0, 0.999, 0.997]), RECORDED, "cpu"))
    assert judged["modular.a"]["outcome"] == REPRODUCED and judged["modular.a"]["n"] == 5
    assert judged["modular.b"]["outcome"] == CLOSE and judged["modular.b"]["ours"] == "m"
    assert judged["modular.c"]["outcome"] == UNTESTED and "hardware" in judged["modular.c"]["why"]
    assert judged["modular.d"]["outcome"] is None
    assert judged["modular.e"]["outcome"] == UNTESTED and "make modular-source" in judged["modular.e"]["why"]
    far = by_id(claims.verdicts(LEDGER, rows([0.6, 0.7, 0.65]), RECORDED, "cpu"))
    assert far["modular.a"]["outcome"] == NOT_REPRODUCED


def test_a_profile_that_does_not_run_the_claim_says_so():
    judged = by_id(claims.verdicts(LEDGER, rows([1.0] * 3), RECORDED, "paper"))
    assert judged["modular.a"]["outcome"] == UNTESTED and "the cpu profile" in judged["modular.a"]["why"]


def test_a_named_targets_verdicts_come_from_its_file(tmp_path):
    done = {"modular.e": {"outcome": REPRODUCED, "ours": "8,350 steps", "n": 5, "why": "w"}}
    judged = by_id(claims.verdicts(LEDGER, rows([1.0]), RECORDED, "cpu", elsewhere=done))
    assert judged["modular.e"]["outcome"] == REPRODUCED and judged["modular.e"]["via"] == "modular-source"
    # the target's own run computes them from its records
    gpt = pd.DataFrame([{"task": "modular", "model": "gpt-sin", "size": "sanity", "seed": s,
                         "val_acc_step": v} for s, v in enumerate([8390, 8410, 8400])])
    own = by_id(claims.verdicts(LEDGER, gpt, RECORDED, "cpu", targets=("modular-source",)))
    assert own["modular.e"]["outcome"] == REPRODUCED
    path = tmp_path / "modular-source.json"
    path.write_text(json.dumps({"target": "modular-source", "claims": [
        {"id": "modular.e", "outcome": REPRODUCED, "ours": "o", "n": 5, "why": "w"},
        {"id": "modular.a", "outcome": UNTESTED}]}))
    assert set(claims.elsewhere(path)) == {"modular.e"}
    assert claims.elsewhere(tmp_path / "none.json") == {}


def test_counts_keep_settings_apart():
    judged = claims.verdicts(LEDGER, rows([1.0] * 3), RECORDED, "cpu")
    c = claims.counts(judged)
    assert c["settings"] == 1 and sum(c[o] for o in c if o != "settings") == 4


def test_the_source_number_in_words():
    assert claims.reported_words({"value": 0.9979, "spread": 0.0021, "unit": "fraction",
                                  "statistic": "mean of 2 seeds"}) == \
        "0.9979 ± 0.0021 fraction (mean of 2 seeds)"
    assert claims.reported_words({"value": {"rnn": 1.41, "gru": 1.21}}) == "rnn 1.41, gru 1.21"
    assert claims.reported_words(None) == "–"


def test_the_ledger_files_parse_as_plain_yaml():
    for task in TASKS:
        assert yaml.safe_load(claims.path(task).read_text())["source"]["task"] == task
