"""The results page and the README's block: every number comes from the run records."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from arithrepro import crosscheck
from arithrepro.report import results, results_page, tables
from arithrepro.tasks.declared import Report

ROOT = Path(__file__).resolve().parents[1]


def _records():
    origin = {"commit": "0123456789abcdef", "dirty": False, "cpu": "Some CPU", "threads": 2,
              "cpu_capability": "AVX512", "versions": {"torch": "2.13.0"}, "python": "3.11.7"}
    rows = [{"task": "expr", "model": m, "size": "small", "seed": s, "params": p,
             "test_acc": acc + s / 100, "ood_acc": 0.1, "train_seconds": 30.0, "eval_seconds": 3.0}
            for m, p, acc in (("gpt", 100, 0.5), ("lstm", 90, 0.25)) for s in (0, 1, 2)]
    rows.append({"task": "charlm", "model": "rnn", "size": "s20", "seed": 0, "params": 10,
                 "final_bpc": 2.5, "train_seconds": 60.0})
    return rows, [origin] * len(rows)


@pytest.fixture
def data():
    rows, origins = _records()
    df = tables._frame(rows)
    return results.collect(df, {"expr": Report(("test_acc", "ood_acc")),
                                "charlm": Report(("final_bpc",))}, origins, "cpu")


def test_each_cell_is_its_seeds_mean_and_sample_std(data):
    gpt = data["tasks"]["expr"]["cells"][0]
    assert (gpt["model"], gpt["n"]) == ("gpt", 3)
    assert gpt["test_acc"]["mean"] == pytest.approx(0.51)
    assert gpt["test_acc"]["std"] == pytest.approx(0.01)
    rnn = data["tasks"]["charlm"]["cells"][0]
    assert rnn["n"] == 1 and rnn["final_bpc"] == {"mean": 2.5, "std": None}
    assert data["runs"] == 7 and data["seconds"]["train_seconds"] == 240.0
    assert data["origin"]["cpu_capability"] == ["AVX512"] and data["origin"]["torch"] == ["2.13.0"]


def test_the_page_and_the_block_show_what_was_collected(data):
    pages = results_page.pages(data, {"expr": ["expr_accuracy_vs_params.png"]})
    summary, expr = pages["results.md"], pages["results/expr.md"]
    assert "| gpt | small | 3 | 51.0 ± 1.0 % | 10.0 ± 0.0 % |" in expr
    assert "![expr: expr_accuracy_vs_params](expr_accuracy_vs_params.png)" in expr
    assert "commit 0123456, on Some CPU (AVX512), 2 threads per run, torch 2.13.0" in summary
    # what each task cost: expr's six runs of 30 s and 3 s, charlm's one of 60 s, which scores
    # it while it trains
    assert ("4.0 min of training and 18 s of evaluation in all: expr 3.0 min of training and "
            "18 s of evaluation, charlm 1.0 min of training and its evaluation inside it.") in summary
    assert "[verdicts.md](verdicts.md)" in summary and "[All sources](../results.md)" in expr
    block = results.readme_block(data)
    assert block.startswith(results.README_START) and block.endswith(results.README_END)
    assert "gpt small: test_acc 51.0 ± 1.0 %, ood_acc 10.0 ± 0.0 % (3)" in block
    # JSON round trip: the README block is rendered from docs/results.json
    assert results.readme_block(json.loads(json.dumps(data))) == block


def test_a_readme_without_its_block_is_one_clear_error():
    with pytest.raises(ValueError, match="README.md: no block <!-- results:"):
        results.with_block("# title\n", "x")
    text = f"a\n{results.README_START}\nold\n{results.README_END}\nb\n"
    assert results.with_block(text, "new") == "a\nnew\nb\n"


def test_only_a_full_profiles_complete_run_is_published(tmp_path):
    data = {"profile": "smoke"}
    with pytest.raises(ValueError, match="x.json: from the smoke profile, which is never published"):
        results.publishable(data, Path("x.json"))
    results.publishable({"profile": "cpu"}, Path("x.json"), lambda: [])
    stale = lambda: ["results", "train-expr@gpt-small-100", "evaluate-expr@gpt-small-100", "x"]  # noqa: E731
    with pytest.raises(ValueError, match=r"x.json: 4 stage\(s\) of the pipeline are not up to "
                                         r"date \(results, train-expr@gpt-small-100, evaluate-"
                                         r"expr@gpt-small-100, \.\.\.\); run `arithrepro repro`"):
        results.publishable({"profile": "cpu"}, Path("x.json"), stale)


def test_publishing_copies_the_pages_and_replaces_the_old_ones(tmp_path):
    src, dst = tmp_path / "pages", tmp_path / "docs"
    (src / "results").mkdir(parents=True)
    (src / "results.md").write_text("new page")
    (src / "results" / "expr.md").write_text("new expr")
    (dst / "results").mkdir(parents=True)
    (dst / "results" / "gone.md").write_text("a page no longer made")
    (dst / "other.md").write_text("kept")
    with pytest.raises(FileNotFoundError, match="pages/results.json: missing"):
        results.publish_pages(src, dst, ("results.md", "results.json", "results"))
    assert (dst / "results" / "gone.md").exists() and not (dst / "results.md").exists()
    (src / "results.json").write_text("{}")
    results.publish_pages(src, dst, ("results.md", "results.json", "results"))
    assert sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*")) == [
        "other.md", "results", "results.json", "results.md", "results/expr.md"]
    assert (dst / "results.md").read_text() == "new page"


def test_a_figure_copy_is_no_wider_than_the_page(tmp_path):
    from PIL import Image

    Image.new("RGB", (2000, 1000), "white").save(tmp_path / "big.png")
    out = results.thumbnail(tmp_path / "big.png", tmp_path / "small" / "big.png")
    with Image.open(out) as image:
        assert image.size == (results.THUMBNAIL_WIDTH, results.THUMBNAIL_WIDTH // 2)
    assert sorted(p.name for p in (tmp_path / "small").iterdir()) == ["big.png"]


def test_the_readmes_results_are_the_generated_ones():
    """No number in the README's results section that the results stage or crosscheck did not
    write."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Results", 1)[1].split("\n## ", 1)[0]
    start, end = section.index(results.README_START), section.index(results.README_END)
    outside = section[:start] + section[end:]
    if crosscheck.README_START in section:   # the crosscheck's block, where the README has one
        cross = section.index(crosscheck.README_START), section.index(crosscheck.README_END)
        assert cross[1] < start, "the crosscheck block before the results block"
        outside = section[:cross[0]] + section[cross[1]:start] + section[end:]
    assert not re.search(r"\d", outside), "a number typed by hand in the README's results"
    generated = ROOT / "docs" / "results.json"
    if generated.is_file():
        block = section[start:end + len(results.README_END)]
        assert block == results.readme_block(json.loads(generated.read_text())), \
            "run `arithrepro results --readme`"


def test_a_mean_and_its_std_share_the_stds_first_decimal():
    from arithrepro.report.tables import format_mean

    assert format_mean("final_bpc", 2.17031, 0.004366) == "2.170 ± 0.004"
    assert format_mean("final_bpc", 2.2183, 0.6) == "2.2 ± 0.6"
    assert format_mean("test_acc", 0.51, 0.01) == "51.0 ± 1.0 %"
    assert format_mean("steps", 1280.0, 0.0) == "1,280 ± 0"
    assert format_mean("final_bpc", 2.17031, None) == "2.17"


def test_every_seed_is_on_the_page(data):
    gpt = data["tasks"]["expr"]["cells"][0]
    assert gpt["seeds"] == {0: {"test_acc": 0.5, "ood_acc": 0.1}, 1: {"test_acc": 0.51, "ood_acc": 0.1},
                            2: {"test_acc": 0.52, "ood_acc": 0.1}}
    pages = results_page.pages(data, {})
    # the source's page points to them; the findings page holds them
    assert "[the findings page](expr-findings.md#every-seed)" in pages["results/expr.md"]
    page = pages["results/expr-findings.md"]
    assert "## <a id=\"every-seed\"></a>Every seed" in page
    assert "<details><summary>Every seed</summary>" in page
    assert "| gpt | small | 2 | 52.0 % | 10.0 % |" in page


WHERE = "commit abc1234 (clean), AMD EPYC (AVX2), 1 thread, torch 2.13.0+cpu, seeds 100-104"


def _ledger_data(data, stand_in=None, carried=None):
    from arithrepro import claims
    from arithrepro.findings.base import CLOSE

    test = {"finding": "expr.order", "profiles": ["cpu", "paper"]}
    if stand_in:
        test["stand_in"] = {"cpu": stand_in}
    ledger = {"source": {"file": "000", "task": "expr", "title": "T", "carries": "Code."},
              "claims": [
                  {"id": "expr.a", "where": "fig 1", "claim": "ReTran | first", "kind": "trend",
                   "setting": "s", "test": test},
                  {"id": "expr.b", "where": "cell 3", "claim": "LAMB", "kind": "setting",
                   "setting": "s", "here": "followed"},
                  {"id": "expr.c", "where": "title", "claim": "ACL", "kind": "qualitative",
                   "setting": "s", "untested": {"reason": "unmeasurable", "why": "bibliographic"}}]}
    findings = [{"id": "expr.order", "outcome": CLOSE, "measured": "Δ +1.2 points", "n": 5,
                 "test": "permutation"}]
    sets = [claims.RunSet("cpu", pd.DataFrame(), findings, where=WHERE)]
    if carried:
        sets.append(claims.RunSet("paper", carried=carried, where="commit def5678 (clean), H200",
                                  other_code="from commit def5678: 2 files differ"))
    judged = claims.verdicts(ledger, sets)
    data["tasks"]["expr"]["ledger"] = claims.ledger_rows(ledger, judged)
    data["claims"] = claims.counts(judged)
    return data


def _row(page: str, claim: str) -> str:
    return next(line for line in page.splitlines()
                if re.match(rf"\| (<a id=\"[^\"]+\"></a>)?{re.escape(claim)} \|", line))


def _pages(data) -> dict:
    return results_page.pages(data, {})


def test_the_ledger_on_the_page_and_its_counts_in_the_readme(data):
    data = _ledger_data(data, stand_in="problems of 3-8 characters, not 8-30")
    pages = _pages(data)
    page = pages["results/expr.md"]
    assert "## The source's claims" in page
    row = _row(page, "ReTran \\| first")
    assert "| [fig 1](../../claims/expr.yaml) | – | Δ +1.2 points | too close to call, on a " \
           "stand-in (problems of 3-8 characters, not 8-30): finding " \
           "[expr.order](expr-findings.md#expr.order) | cpu |" in row
    assert f"| cpu | {WHERE} | the page's |" in page   # where it ran: once, in the run sets
    assert "<summary>The source's settings (1), each followed or departed from as its ledger " \
           "entry says</summary>\n\n<a id=\"expr.b\"></a>[expr.b](../../claims/expr.yaml)\n" \
           in page
    assert "<summary>Not tested here, not measurable (1)</summary>" in page
    # the summary: the tested claim in one short row, linking its detail
    assert "| ReTran \\| first | expr | – | Δ +1.2 points | too close to call | a stand-in | " \
           "[expr.a](results/expr.md#expr.a) |" in pages["results.md"]
    block = results_page.claims_block(json.loads(json.dumps(data)))
    assert block.startswith(results.CLAIMS_START) and block.endswith(results.CLAIMS_END)
    assert "0 reproduced, 0 not reproduced, 1 too close to call (1 on a stand-in), 0 differs " \
           "between machines, 0 n too small to decide, 0 consistency checks, 1 not tested here " \
           "(1 not measurable)" in block
    assert "Of the 1 claim a run here tested as a reproduction, 0 reproduced" in block
    assert "[docs/verdicts.md](docs/verdicts.md)" in block
    assert "| [expr](docs/results/expr.md): T | 0 / 0 | 0 / 0 | 0 / 1 | 0 / 0 | 0 | 0 | 1 | 1 |" \
        in block


@pytest.mark.parametrize("drop, words", [
    ("class", "on a stand-in"), ("stand_in", "problems of 3-8 characters"), ("where", WHERE)])
def test_a_row_without_its_class_stand_in_or_provenance_is_caught(data, drop, words):
    data = _ledger_data(data, stand_in="problems of 3-8 characters, not 8-30")
    assert words in _pages(data)["results/expr.md"]
    row = data["tasks"]["expr"]["ledger"]["claims"][0]
    if drop == "class":
        row["class"] = None
    else:
        row["judged"][0][drop] = ""
    assert words not in _pages(data)["results/expr.md"]


def test_a_claim_judged_by_two_run_sets_shows_both_and_which_decides(data):
    from arithrepro.findings.base import REPRODUCED

    data = _ledger_data(data, stand_in="problems of 3-8 characters, not 8-30",
                        carried={"expr.a": {"outcome": REPRODUCED, "ours": "Δ +9 points", "n": 3,
                                            "why": "finding expr.order"}})
    page = _pages(data)["results/expr.md"]
    row = _row(page, "ReTran \\| first")
    # the paper run is at the source's setting: it decides over the cpu stand-in, and its code
    # is not the page's
    assert "reproduced, at the source's setting" in row and "| **paper**; cpu: too close" in row
    assert "| paper | commit def5678 (clean), H200 | from commit def5678: 2 files differ |" in page
    assert "| **paper**; cpu: too close to call |" in row


def test_why_rows_are_consistency_checks_is_written_once_when_shared(data):
    data = _ledger_data(data)
    ledger = {"source": {"file": "000", "task": "expr", "title": "T", "carries": "Code."},
              "claims": [{"id": f"expr.p{i}", "where": "cell 2", "claim": f"count {i}",
                          "kind": "number", "setting": "s",
                          "test": {"finding": "expr.order", "profiles": ["cpu"],
                                   "consistency": "a count follows from the shapes"}}
                         for i in range(3)]}
    from arithrepro import claims
    from arithrepro.findings.base import REPRODUCED

    findings = [{"id": "expr.order", "outcome": REPRODUCED, "measured": "39,328", "n": 5}]
    judged = claims.verdicts(ledger, [claims.RunSet("cpu", pd.DataFrame(), findings, where=WHERE)])
    data["tasks"]["expr"]["ledger"] = claims.ledger_rows(ledger, judged)
    page = _pages(data)["results/expr.md"]
    assert page.count("a count follows from the shapes") == 1
    assert "- <a id=\"expr-check-a\"></a>check a: a count follows from the shapes" in page
    for i in range(3):
        assert "reproduced, consistency check ([check a](#expr-check-a))" in _row(page, f"count {i}")


def test_a_stand_in_shared_by_rows_is_written_once_and_linked(data):
    data = _ledger_data(data, stand_in="problems of 3-8 characters, not 8-30")
    rows = data["tasks"]["expr"]["ledger"]["claims"]
    rows.append({**rows[0], "id": "expr.d", "claim": "GPT | last"})
    page = _pages(data)["results/expr.md"]
    assert page.count("problems of 3-8 characters, not 8-30") == 1
    note = "<a id=\"expr-stand-in-a\"></a>stand-in a: problems of 3-8 characters, not 8-30"
    assert f"- {note}" in page
    for claim in ("ReTran \\| first", "GPT \\| last"):
        assert "on a stand-in ([stand-in a](#expr-stand-in-a))" in _row(page, claim)
    # a stand-in one row uses stays on that row
    del rows[-1]
    page = _pages(data)["results/expr.md"]
    assert "stand-in a" not in page
    assert "on a stand-in (problems of 3-8 characters, not 8-30)" in _row(page, "ReTran \\| first")


def test_a_findings_measurement_is_written_whole_once_and_in_short_on_its_rows(data):
    data = _ledger_data(data, stand_in="s")
    data["tasks"]["expr"]["findings"] = [{"id": "expr.order", "claim": "c", "test": "t",
                                          "outcome": "too close to call",
                                          "measured": "Δ +1.2 points", "n": 5}]
    data["tasks"]["expr"]["findings"][0]["measured"] = long = "; ".join(
        f"part {i}: Δ +1.2 points (95 % CI [+0.1, +2.3]), g 1.1, permutation p 0.004 (5 vs 5)"
        for i in range(4))
    data["tasks"]["expr"]["ledger"]["claims"][0]["ours"] = long
    pages = _pages(data)
    tests = pages["results/expr-findings.md"]
    assert tests.count("part 3: Δ +1.2 points") == 1
    assert "## <a id=\"expr.order\"></a>expr.order: too close to call\n\nC. Test: t.\n\n" \
        "- part 0: Δ +1.2 points (95 % CI [+0.1, +2.3]), g 1.1, permutation p 0.004 (5 vs 5)\n" \
        "- part 1:" in tests
    # the source's page: the measurement in short, linking the whole
    row = _row(pages["results/expr.md"], "ReTran \\| first")
    assert long not in pages["results/expr.md"]
    assert f"| {results_page.short(long)} ([all](expr-findings.md#expr.order)) |" in row
    assert "[the findings' tests and every seed](expr-findings.md)" in pages["results/expr.md"]


def test_a_claim_measured_against_the_sources_number_is_whole_in_a_section_of_its_own(data):
    data = _ledger_data(data)
    claim = data["tasks"]["expr"]["ledger"]["claims"][0]
    claim["why"] = long_rule = ("within ± 0.0004 of 0.0008 (the source's std over seeds 0 and 42, "
                                "printed to four decimals)")
    claim["ours"] = long = "; ".join(f"part {i}: 0.026 over 5 seeds, 95 % interval [0.000, "
                                     "0.111] (t over seeds, log scale)" for i in range(3))
    pages = _pages(data)
    row = _row(pages["results/expr.md"], "ReTran \\| first")
    assert long not in row and long_rule not in row
    assert f"{results_page.short(long)} ([all](expr-findings.md#expr.a))" in row
    assert "([rule](expr-findings.md#expr.a))" in row
    section = pages["results/expr-findings.md"].split('<a id="expr.a"></a>', 1)[1]
    assert long_rule in section and "- part 2: 0.026 over 5 seeds" in section


def test_a_measurement_splits_into_its_parts_outside_brackets():
    text = ("a: Δ -0.010 nats (95 % CI –), g –, permutation p 1.000 (1 vs 1; at these n p cannot "
            "go below 0.500); b: Δ +2 (95 % CI [+1; +3]) (Holm's correction over the 2 parts for "
            "a reversal). To decide (each part): 3 seeds a side")
    parts, after = results_page.measured_parts(text)
    assert parts == ["a: Δ -0.010 nats (95 % CI –), g –, permutation p 1.000 (1 vs 1; at these n "
                     "p cannot go below 0.500)", "b: Δ +2 (95 % CI [+1; +3])"]
    assert after == ("Holm's correction over the 2 parts for a reversal. To decide (each part): "
                     "3 seeds a side.")
    assert results_page.measured_parts("one part") == (["one part"], "")


def test_a_long_text_is_cut_at_a_clause_with_an_ellipsis():
    text = "Δ +510 steps (95 % CI [+492, +528]), g 36.9, permutation p 0.004 (5 vs 5); " * 4
    out = results_page.short(text, 80)
    assert len(out) <= 82 and out.endswith(" …") and out.startswith("Δ +510 steps")
    assert results_page.short("short", 80) == "short"


def test_the_readmes_claims_are_the_generated_ones():
    readme = (ROOT / "README.md").read_text()
    first_screen = readme.split("## What it is", 1)[0]
    start, end = first_screen.index(results.CLAIMS_START), first_screen.index(results.CLAIMS_END)
    generated = ROOT / "docs" / "results.json"
    if generated.is_file():
        assert first_screen[start:end + len(results.CLAIMS_END)] == \
            results_page.claims_block(json.loads(generated.read_text())), \
            "run `arithrepro results --readme`"


def test_a_named_targets_results_keep_its_claims_and_its_watched_seeds_apart():
    def judged(watched):
        return {"set": "modular-source", "outcome": "reproduced", "class": "at the source's setting",
                "ours": "o", "n": 2 if watched else 5, "why": "w", "watched": watched}

    cells = [{"model": "gpt-sin", "size": "sanity", "n": 7,
              "seeds": {str(s): {} for s in (0, 42, 100, 101, 102, 103, 104)}}]
    data = {"profile": "cpu", "runs": 10, "origin": {"cpu": ["X"]}, "targets": ["modular-source"],
            "tasks": {"modular": {"cells": cells, "ledger": {
                "source": {"watched": {"seeds": [0, 42], "why": "w"}},
                "claims": [
                    {"id": "modular.a", "claim": "a", "profiles": ["modular-source"],
                     "outcome": "reproduced", "judged": [judged(False), judged(True)]},
                    {"id": "modular.b", "claim": "b", "profiles": ["cpu"], "outcome": "reproduced",
                     "judged": []},
                    {"id": "modular.c", "claim": "c", "profiles": ["modular-source"],
                     "outcome": None}]}}}}
    out = results.source_study(data)
    assert [c["id"] for c in out["claims"]] == ["modular.a"] and out["target"] == "modular-source"
    assert out["seeds"] == [100, 101, 102, 103, 104] and out["claims"][0]["n"] == 5
    assert out["watched"]["seeds"] == [0, 42] and out["watched"]["claims"][0]["n"] == 2
    with pytest.raises(ValueError, match="ran no modular-source target"):
        results.source_study({**data, "targets": []})


def test_a_results_file_from_before_the_classes_says_so(data):
    data = _ledger_data(data)
    data["claims"] = {"reproduced": 1, "not reproduced": 0, "too close to call": 2,
                      "not tested here": 3, "settings": 4}
    block = results_page.claims_block(json.loads(json.dumps(data)))
    assert "before verdicts had classes" in block and "`make repro` judges them again" in block
    assert "**1 reproduced, 0 not reproduced, 2 too close to call, 3 not tested here**" in block


def test_the_found_sentences_count_and_name_what_failed():
    from arithrepro.claims import CONSISTENCY, SOURCE, STAND_IN
    from arithrepro.findings.base import NOT_REPRODUCED, REPRODUCED, UNTESTED

    def row(i, outcome, cls=STAND_IN, reason=None):
        return {"id": f"expr.{i}", "claim": f"claim {i}", "outcome": outcome, "class": cls,
                "reason": reason}

    rows = [row(0, REPRODUCED, SOURCE), row(1, REPRODUCED),
            *(row(i, NOT_REPRODUCED) for i in range(2, 7)), row(7, NOT_REPRODUCED, SOURCE),
            row(8, REPRODUCED, CONSISTENCY), row(9, UNTESTED, None, "paper"),
            {"id": "expr.s", "claim": "s", "outcome": None}]
    # two claims decided by one finding are named once, in the finding's words
    rows[3]["why"] = rows[4]["why"] = "finding expr.f: ..."
    findings = [{"id": "expr.f", "claim": "the finding's gist"}]
    said = " ".join(results_page.found_sentences(
        {"tasks": {"expr": {"ledger": {"claims": rows}, "findings": findings}}}, "results/"))
    assert "Of the 8 claims a run here tested as a reproduction, 2 reproduced (1 at the " \
           "source's setting, 1 on a smaller stand-in), 6 did not (1 at the source's setting)" in said
    # the source's setting named first, four in all, the rest counted
    assert "Not reproduced: expr: claim 7 (the source's setting); expr: claim 2 (a stand-in); " \
           "expr: the finding's gist (a stand-in); expr: claim 5 (a stand-in); and 1 more." in said
    assert "claim 3" not in said and "claim 6" not in said
    assert "[expr](results/expr.md) 2 of 8" in said
    assert "The one consistency check of the build holds." in said
    assert "1 claim is not tested here: 1 needs the paper profile" in said


def test_the_reading_path_of_the_committed_results_is_short_and_its_cells_too():
    """Rendered from the committed docs/results.json: the summary and the source pages, the path
    a reader walks unfolded (the untested claims and the settings are folded, one click away),
    within a third of the single page they replaced (33,871 words), and no table cell on them
    over a few hundred characters; the findings pages hold the rest."""
    data = json.loads((ROOT / "docs" / "results.json").read_text())
    pages = results_page.pages(data, {})
    path = {name: re.sub(r"<details>.*?</details>", "", text, flags=re.S)
            for name, text in pages.items() if not name.endswith("-findings.md")}
    assert all("<details>" in pages[name] for name in path if name != "results.md")
    assert sum(len(text.split()) for text in path.values()) < 33_871 / 3
    long = [(name, c[:60]) for name, text in path.items() for line in text.splitlines()
            if line.startswith("| ") for c in line.strip("|").split(" | ") if len(c) > 300]
    assert not long, long
    assert {n for n in pages if n.endswith("-findings.md")}   # the measurements went somewhere


def test_the_runs_cell_names_each_verdict_once_and_marks_agreement():
    """The deciding set first, in bold; the sets that give its verdict say they agree, the
    others' verdicts each once with every set that gave it; watched seeds stand apart."""
    r = {"via": "cpu", "judged": [
        {"set": "cpu", "outcome": "reproduced"},
        {"set": "cpu", "setting": "avx2-t1", "outcome": "reproduced"},
        {"set": "source", "outcome": "too close to call"},
        {"set": "cpu", "setting": "avx512-t2", "outcome": "too close to call"},
        {"set": "cpu", "watched": True, "outcome": "not reproduced"}]}
    assert results_page.runs_cell(r) == (
        "**cpu**; cpu @ avx2-t1: agrees; source, cpu @ avx512-t2: too close to call; "
        "watched seeds: **not reproduced**")
    one = {"via": "cpu", "judged": [{"set": "cpu", "outcome": "reproduced"},
                                    {"set": "paper", "outcome": "reproduced"},
                                    {"set": "big", "outcome": "reproduced"}]}
    assert results_page.runs_cell(one) == "**cpu**; paper, big: agree"
    assert results_page.runs_cell({"via": "cpu", "judged": [one["judged"][0]]}) == "cpu"


def test_the_committed_page_is_what_its_run_set_files_judge(monkeypatch):
    """Judging the committed page again on the committed run-set files (docs/runsets/,
    docs/crosscheck/) changes no row: a file re-made without the page following fails here."""
    from arithrepro.stages.results import rejudged

    monkeypatch.chdir(ROOT)
    path = ROOT / "docs" / "results.json"
    data = json.loads(path.read_text())
    needs_history(data["origin"]["commit"][0])
    again = rejudged(json.loads(path.read_text()), path)
    for task, t in data["tasks"].items():
        rows = {r["id"]: r for r in again["tasks"][task]["ledger"]["claims"]}
        for row in t["ledger"]["claims"]:
            assert rows[row["id"]] == row, f"{row['id']}: run `arithrepro results --rejudge`"
    assert again["claims"] == data["claims"]


def test_judging_again_follows_a_carried_file_and_keeps_the_pages_own_verdicts(tmp_path,
                                                                               monkeypatch):
    from arithrepro import runsets
    from arithrepro.io import ArtifactError
    from arithrepro.stages.results import rejudged

    monkeypatch.chdir(ROOT)
    path = ROOT / "docs" / "results.json"
    needs_history(json.loads(path.read_text())["origin"]["commit"][0])
    source = json.loads((ROOT / runsets.CARRIED["modular-source"]).read_text())
    claim = next(c for c in source["claims"] if c["outcome"] == "reproduced"
                 and c["id"].startswith("modular.sanity."))
    claim["outcome"] = "not reproduced"
    moved = tmp_path / "modular-source.json"
    moved.write_text(json.dumps(source))
    monkeypatch.setitem(runsets.CARRIED, "modular-source", moved)
    data = json.loads(path.read_text())
    again = rejudged(json.loads(path.read_text()), path)
    old = {r["id"]: r for r in data["tasks"]["modular"]["ledger"]["claims"]}
    new = {r["id"]: r for r in again["tasks"]["modular"]["ledger"]["claims"]}
    assert new[claim["id"]]["outcome"] == "not reproduced" != old[claim["id"]]["outcome"]
    assert again["claims"] != data["claims"]
    # the page's own runs judge as published: a row no file tests is unchanged
    own = next(i for i, r in old.items() if r["via"] == data["profile"])
    assert new[own] == old[own]

    data["origin"]["commit"] = ["aaaaaaa", "bbbbbbb"]
    with pytest.raises(ArtifactError, match=r"results\.json.*origin\.commit.*one commit"):
        rejudged(data, path)
    data["origin"]["commit"] = ["d3e14a73e02cbe00b06b9a43b1eac545f89c2709"]
    with pytest.raises(ArtifactError, match=r"the page's runs are from commit d3e14a7: .* differ"):
        rejudged(data, path)   # their code is not HEAD's: the results stage would refuse them
    data = json.loads(path.read_text())
    data["tasks"]["expr"]["ledger"]["claims"].pop()
    with pytest.raises(ArtifactError, match=r"tasks\.expr: claims .* differ between the page and"):
        rejudged(data, path)


def needs_history(commit: str) -> None:
    """Skips where this clone lacks `commit` (a shallow clone): code is compared through git."""
    import subprocess

    if subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT,
                      capture_output=True).returncode:
        pytest.skip(f"needs commit {commit[:7]} in this clone's history")
