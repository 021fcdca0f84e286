"""The claims ledger (claims/<task>.yaml, arithrepro/claims.py): every file follows the schema,
every finding tests some claim of its source, and each way of testing a claim gives its verdict
from the records, the findings or a named target's file."""

import copy
from pathlib import Path

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
               "setting": "Colab", "untested": {"reason": "unmeasurable", "why": "their hardware"}},
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


def rows(val_accs, seeds=None):
    return pd.DataFrame([{"task": "modular", "model": "lstm-std", "size": "sanity", "seed": s,
                          "val_acc": v} for s, v in zip(seeds or range(len(val_accs)), val_accs)])


RECORDED = [{"id": "modular.late", "outcome": CLOSE, "measured": "m", "n": 5, "test": "t"}]
WHERE = "commit abc1234 (clean), a CPU (AVX2), 1 thread, torch 2.13.0+cpu, seeds 100-104"


def own(name, df, **kw):
    return claims.RunSet(name, df, RECORDED, where=WHERE, **kw)


def by_id(judged):
    return {v["id"]: v for v in judged}


def test_verdicts_by_metric_finding_untested_and_setting():
    judged = by_id(claims.verdicts(LEDGER, [own("cpu", rows([0.999, 0.998, 1.0, 0.999, 0.997]))]))
    a = judged["modular.a"]
    assert a["outcome"] == REPRODUCED and a["n"] == 5 and a["class"] == claims.SOURCE
    assert a["via"] == "cpu" and a["judged"][0]["where"] == WHERE
    assert judged["modular.b"]["outcome"] == CLOSE and judged["modular.b"]["ours"] == "m"
    c = judged["modular.c"]
    assert c["outcome"] == UNTESTED and c["reason"] == "unmeasurable" and "hardware" in c["why"]
    assert judged["modular.d"]["outcome"] is None
    e = judged["modular.e"]
    assert e["outcome"] == UNTESTED and e["reason"] == "not-run" and "make modular-source" in e["why"]
    far = by_id(claims.verdicts(LEDGER, [own("cpu", rows([0.6, 0.7, 0.65]))]))
    assert far["modular.a"]["outcome"] == NOT_REPRODUCED


def test_a_profile_that_does_not_run_the_claim_says_so():
    judged = by_id(claims.verdicts(LEDGER, [own("paper", rows([1.0] * 3))]))
    assert judged["modular.a"]["outcome"] == UNTESTED and "the cpu profile" in judged["modular.a"]["why"]


def test_a_paper_only_claim_costs_the_measured_estimate():
    ledger = copy.deepcopy(LEDGER)
    ledger["claims"][0]["test"]["profiles"] = ["paper"]
    judged = by_id(claims.verdicts(ledger, [own("cpu", rows([1.0] * 3))],
                                   {"device": "NVIDIA H200", "tasks": {"modular": 7200.0}}))
    a = judged["modular.a"]
    assert a["reason"] == "paper" and "2.0 GPU-hours on NVIDIA H200" in a["why"]
    unmeasured = by_id(claims.verdicts(ledger, [own("cpu", rows([1.0] * 3))]))["modular.a"]
    assert "not yet measured" in unmeasured["why"]


def test_a_stand_in_and_a_consistency_check_say_so():
    ledger = copy.deepcopy(LEDGER)
    ledger["claims"][0]["test"]["stand_in"] = {"cpu": "900 steps, not 10,001"}
    a = by_id(claims.verdicts(ledger, [own("cpu", rows([0.999, 0.998, 1.0]))]))["modular.a"]
    assert a["class"] == claims.STAND_IN and a["judged"][0]["stand_in"] == "900 steps, not 10,001"
    ledger["claims"][0]["test"]["consistency"] = "any working run fits 480 equations"
    a = by_id(claims.verdicts(ledger, [own("cpu", rows([0.999, 0.998, 1.0]))]))["modular.a"]
    assert a["class"] == claims.CONSISTENCY
    c = claims.counts(claims.verdicts(ledger, [own("cpu", rows([0.999, 0.998, 1.0]))]))
    assert c["consistency"] == {REPRODUCED: 1} and c[REPRODUCED] == {}


def test_a_named_targets_verdicts_come_from_its_run_set():
    done = {"modular.e": {"outcome": REPRODUCED, "ours": "8,350 steps", "n": 5, "why": "w"}}
    sets = [own("cpu", rows([1.0])), claims.RunSet("modular-source", carried=done, where="there")]
    judged = by_id(claims.verdicts(LEDGER, sets))
    assert judged["modular.e"]["outcome"] == REPRODUCED and judged["modular.e"]["via"] == "modular-source"
    # the target's own run computes them from its records
    gpt = pd.DataFrame([{"task": "modular", "model": "gpt-sin", "size": "sanity", "seed": s,
                         "val_acc_step": v} for s, v in enumerate([8390, 8410, 8400])])
    judged = by_id(claims.verdicts(LEDGER, [own("cpu", gpt), own("modular-source", gpt)]))
    assert judged["modular.e"]["outcome"] == REPRODUCED


def test_watched_seeds_never_decide():
    done = {"modular.e": {"outcome": REPRODUCED, "ours": "o", "n": 2, "why": "w"}}
    sets = [claims.RunSet("modular-source", carried=done, where="seeds 0, 42", watched=True)]
    e = by_id(claims.verdicts(LEDGER, sets))["modular.e"]
    assert e["outcome"] == UNTESTED and e["judged"][0]["watched"] and e["reason"] == "not-run"
    assert "only seeds watched while a recipe was chosen judged it" in e["why"]


def test_the_source_setting_decides_over_a_stand_in_and_own_code_over_other():
    j = lambda name, outcome, cls, n=5, other="": {   # noqa: E731
        "set": name, "outcome": outcome, "class": cls, "ours": "", "n": n, "why": "",
        "other_code": other, "watched": False}
    assert claims.decide([j("cpu", CLOSE, claims.STAND_IN),
                          j("modular-source", REPRODUCED, claims.SOURCE)])["via"] == "modular-source"
    assert claims.decide([j("old", REPRODUCED, claims.SOURCE, other="from commit x"),
                          j("new", CLOSE, claims.SOURCE)])["via"] == "new"
    assert claims.decide([j("a", CLOSE, claims.SOURCE, n=2), j("b", CLOSE, claims.SOURCE, n=5)])["via"] == "b"


def test_a_stated_band_decides_a_step_on_the_sources_grid():
    ledger = copy.deepcopy(LEDGER)
    t = ledger["claims"][4]["test"]
    del t["tolerance"], t["tolerance_why"]
    t.update(band=[201, 300], band_why="the source evaluates every 100 steps", profiles=["cpu"])
    ledger["claims"][4]["reported"] = {"value": 300}
    claims.check(ledger, "claims/modular.yaml", "modular")
    late = pd.DataFrame([{"task": "modular", "model": "gpt-sin", "size": "sanity", "seed": s,
                          "val_acc_step": v} for s, v in enumerate([350, 370, 398, 380, 372])])
    e = by_id(claims.verdicts(ledger, [own("cpu", late)]))["modular.e"]
    assert e["outcome"] == NOT_REPRODUCED and "inside [201, 300]" in e["why"]
    t["tolerance"] = 1
    with pytest.raises(claims.LedgerError, match="band_why"):
        claims.check(ledger, "claims/modular.yaml", "modular")


def test_ledger_schema_for_reasons_and_stand_ins():
    bad = copy.deepcopy(LEDGER)
    bad["claims"][2]["untested"] = {"why": "w"}
    with pytest.raises(claims.LedgerError, match="untested.reason"):
        claims.check(bad, "claims/modular.yaml", "modular")
    bad["claims"][2]["untested"] = {"why": "w", "reason": "paper"}
    with pytest.raises(claims.LedgerError, match="untested.cost"):
        claims.check(bad, "claims/modular.yaml", "modular")
    bad = copy.deepcopy(LEDGER)
    bad["claims"][0]["test"]["stand_in"] = {"paper": "not a profile of this test"}
    with pytest.raises(claims.LedgerError, match="test.stand_in"):
        claims.check(bad, "claims/modular.yaml", "modular")


def test_metric_scales_by_name():
    assert claims.scale_of("val_acc") == "proportion" and claims.scale_of("acc_len12") == "proportion"
    assert claims.scale_of("a0.25_val_acc") == "proportion"
    assert claims.scale_of("val_loss_step") == "positive" and claims.scale_of("final_bpc") == "positive"
    assert claims.scale_of("dt_acc_steps") == "real" and claims.scale_of("val_acc_step") == "positive"


def test_counts_keep_settings_apart():
    judged = claims.verdicts(LEDGER, [own("cpu", rows([1.0] * 3))])
    c = claims.counts(judged)
    assert c["settings"] == 1
    assert sum(claims.total(c, o) for o in c if o != "settings") == 4


def test_the_source_number_in_words():
    assert claims.reported_words({"value": 0.9979, "spread": 0.0021, "unit": "fraction",
                                  "statistic": "mean of 2 seeds"}) == \
        "0.9979 ± 0.0021 fraction (mean of 2 seeds)"
    assert claims.reported_words({"value": {"rnn": 1.41, "gru": 1.21}}) == "rnn 1.41, gru 1.21"
    assert claims.reported_words(None) == "–"


def test_the_ledger_files_parse_as_plain_yaml():
    for task in TASKS:
        assert yaml.safe_load(claims.path(task).read_text())["source"]["task"] == task


def test_a_verdict_another_machine_does_not_share_is_shown_as_such():
    from arithrepro.findings.base import DIFFERS

    here = own("cpu", rows([0.999, 0.998, 1.0, 0.999, 0.997]))
    there = claims.RunSet("cpu", carried={"modular.b": {"outcome": REPRODUCED, "ours": "x", "n": 5,
                                                        "why": "finding modular.late"}},
                          where="AVX2, 2 threads", setting="avx2-t2")
    b = by_id(claims.verdicts(LEDGER, [here, there]))["modular.b"]
    assert b["outcome"] == DIFFERS and b["via"] == "cpu"
    assert "this page: too close to call; avx2-t2: reproduced" in b["why"]
    # another machine of other code is shown, but changes nothing
    stale = claims.RunSet("cpu", carried=there.carried, where="x", setting="avx2-t2",
                          other_code="from commit f2a5ff7: 9 files differ")
    assert by_id(claims.verdicts(LEDGER, [here, stale]))["modular.b"]["outcome"] == CLOSE


def test_every_ledger_reads_the_same_with_libyamls_parser_and_pythons():
    """claims.load takes LibYAML's parser where PyYAML has it; the values are the pure-Python
    parser's."""
    for path in sorted((Path(__file__).resolve().parents[1] / "claims").glob("*.yaml")):
        text = path.read_text()
        assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.safe_load(text), path
