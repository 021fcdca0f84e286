"""The run sets a results page judges on (arithrepro/runsets.py): where their runs came from in
words, records from other code refused or labelled, the watched seeds apart."""

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from arithrepro import runsets
from arithrepro.io import ArtifactError

ROOT = Path(__file__).resolve().parents[1]


def git(*args) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_seeds_read_as_runs():
    assert runsets.seed_words([104, 0, 42, 100, 101, 102, 103]) == "0, 42, 100-104"
    assert runsets.seed_words([1, 2]) == "1, 2" and runsets.seed_words([]) == ""


def test_where_words_name_commit_tree_machine_threads_and_seeds():
    o = {"commit": "9d23111abc", "dirty": False, "cpu": "AMD EPYC", "cpu_capability": "AVX2",
         "threads": 1, "versions": {"torch": "2.13.0+cpu"}}
    assert runsets.where_words([o, o], [100, 101, 102]) == \
        "commit 9d23111 (clean), AMD EPYC (AVX2), 1 thread, torch 2.13.0+cpu, seeds 100-102"
    assert "with uncommitted changes" in runsets.where_words([dict(o, dirty=True)], [0])


def test_other_code_is_named_and_the_pages_own_code_is_not():
    head = git("rev-parse", "HEAD")
    assert runsets.other_code("looped", [{"commit": head, "dirty": False}], root=ROOT) == ""
    unknown = runsets.other_code("looped", [{"commit": "0" * 40, "dirty": False}], root=ROOT)
    assert "not in this clone's history" in unknown
    # a copy of the workspace without its history (a test's, a cluster job's) made its own
    assert runsets.other_code("looped", [{"commit": "0" * 40, "dirty": False}], root=ROOT,
                              unknown=False) == ""
    # a tree with uncommitted changes at another commit: its params may be all that changed,
    # which counts for a carried file's runs and not for this workspace's own DVC outputs
    parent = git("rev-parse", "HEAD~1")
    dirty = [{"commit": parent, "dirty": True}]
    if not runsets.other_code("looped", [{"commit": parent, "dirty": False}], root=ROOT):
        assert "with uncommitted changes" in runsets.other_code("looped", dirty, root=ROOT)
        assert runsets.other_code("looped", dirty, root=ROOT, uncommitted=False) == ""
    first = git("rev-list", "--max-parents=0", "HEAD").split()[0]
    old = runsets.other_code("looped", [{"commit": first, "dirty": False}], root=ROOT)
    assert old.startswith(f"from commit {first[:7]}") and "of their stages' code differ" in old


def test_the_pages_own_records_from_other_code_are_refused(monkeypatch):
    monkeypatch.setattr(runsets, "other_code", lambda task, origins, **kw: "from commit 0000000: 3 files differ")
    rows = pd.DataFrame([{"task": "looped", "model": "looped", "size": "notebook", "seed": 100}])
    params = {"profile": "cpu", "claims": {"targets": []}}
    with pytest.raises(ArtifactError, match=r"metrics/looped: records from commit 0000000"):
        runsets.own("looped", rows, [{}], params, {"source": {}}, lambda some: [])


def test_watched_seeds_are_a_run_set_of_their_own(monkeypatch):
    monkeypatch.setattr(runsets, "other_code", lambda task, origins, **kw: "")
    rows = pd.DataFrame([{"task": "modular", "model": "gpt-sin", "size": "sanity", "seed": s}
                         for s in (0, 42, 100, 101)])
    params = {"profile": "cpu", "claims": {"targets": ["modular-source"]}}
    ledger = {"source": {"watched": {"seeds": [0, 42], "why": "w"}}}
    sets = runsets.own("modular", rows, [{"commit": "abc"}], params, ledger,
                       lambda some: sorted(some["seed"]))
    deciding = [s for s in sets if not s.watched]
    assert [s.name for s in deciding] == ["cpu", "modular-source"]
    assert all(s.findings == [100, 101] and "seeds 100, 101" in s.where for s in deciding)
    watched = [s for s in sets if s.watched]
    assert [s.name for s in watched] == ["modular-source"] and watched[0].findings == [0, 42]


def test_a_carried_file_on_watched_seeds_decides_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runsets, "other_code", lambda task, origins, **kw: "from commit e8d635f: x")
    path = tmp_path / "docs" / "runsets" / "modular-source.json"
    path.parent.mkdir(parents=True)
    origin = {"commit": ["e8d635f"], "dirty": [True], "cpu": ["Xeon"], "cpu_capability": ["AVX512"],
              "threads": [1], "torch": ["2.13.0+cpu"]}
    claim = {"id": "modular.a", "outcome": "reproduced", "ours": "o", "n": 5, "why": "w"}
    path.write_text(json.dumps({"claims": [claim], "origin": origin, "cells": [
        {"seeds": {"0": {}, "42": {}, "100": {}}}]}))
    ledger = {"source": {"watched": {"seeds": [0, 42], "why": "w"}}}
    (mixed,) = runsets.carried("modular", ["cpu"], ledger)
    assert mixed.watched and "seeds 0, 42 watched" in mixed.where and mixed.other_code
    # re-run at seeds 100-104, with 0 and 42 apart: the deciding set and the watched one
    path.write_text(json.dumps({"claims": [claim], "origin": origin, "cells": [],
                                "seeds": [100, 101, 102, 103, 104],
                                "watched": {"seeds": [0, 42], "claims": [dict(claim, n=2)]}}))
    deciding, watched = runsets.carried("modular", ["cpu"], ledger)
    assert not deciding.watched and deciding.carried["modular.a"]["n"] == 5
    assert watched.watched and watched.carried["modular.a"]["n"] == 2
    assert runsets.carried("modular", ["cpu", "modular-source"], ledger) == []
    assert runsets.carried("expr", ["cpu"], ledger) == []


def test_the_measured_estimate_per_task(tmp_path):
    path = tmp_path / "estimate.json"
    path.write_text(json.dumps({"gpu": "NVIDIA H200", "profiles": {"paper": [
        {"task": "expr", "total_s": 3600.0}, {"task": "expr", "total_s": 1800.0},
        {"task": "looped", "total_s": 60.0}]}}))
    assert runsets.estimate(path) == {"device": "NVIDIA H200",
                                      "tasks": {"expr": 5400.0, "looped": 60.0}}
    assert runsets.estimate(tmp_path / "none.json") == {}


def test_a_crosscheck_of_the_same_profile_is_a_run_set_of_its_setting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runsets, "other_code", lambda task, origins, **kw: "")
    folder = tmp_path / "docs" / "crosscheck"
    folder.mkdir(parents=True)
    finding = {"id": "looped.generalizes", "outcome": "reproduced", "measured": "m", "n": 5}
    record = {"setting": {"capability": "default", "threads": 1, "set": []}, "profile": "cpu",
              "origin": {"machine": ["AMD EPYC"], "cpu_capability": ["DEFAULT"], "threads": ["1"]},
              "tasks": {"looped": {"findings": [finding], "commit": "9d23111", "seeds": [100, 101]}}}
    (folder / "default-t1.json").write_text(json.dumps(record))
    (folder / "old.json").write_text(json.dumps({**record, "profile": None}))   # before profiles
    ledger = {"claims": [{"id": "looped.looped-generalizes", "test": {"finding": "looped.generalizes"}},
                         {"id": "looped.other", "test": {"finding": "looped.beats-standard"}}]}
    (one,) = runsets.crosschecks("looped", "cpu", ledger)
    assert one.name == "cpu" and one.setting == "default-t1"
    assert set(one.carried) == {"looped.looped-generalizes"}
    assert one.where == "commit 9d23111 (clean), AMD EPYC (DEFAULT), 1 thread, seeds 100, 101"
    assert runsets.crosschecks("looped", "paper", ledger) == []
    # a crosscheck at the page's own vector unit and thread count checks nothing
    other = {"cpu_capability": ["AVX512"], "threads": [1]}
    assert len(runsets.crosschecks("looped", "cpu", ledger, own=other)) == 1
    with pytest.warns(UserWarning, match=r"default-t1\.json: run at this page's own vector unit"):
        assert runsets.crosschecks("looped", "cpu", ledger,
                                   own={"cpu_capability": ["DEFAULT"], "threads": [1]}) == []


def test_the_modular_source_target_runs_the_stages_its_claims_read_and_no_other(tmp_path,
                                                                               monkeypatch):
    from arithrepro import config
    from arithrepro.pipeline import finding_stages
    from arithrepro.report.tables import wanted_runs
    from arithrepro.tasks.registry import wanted

    params = config.compose(["profile=cpu", "sanity=source"], ROOT / "conf")
    runs = wanted("modular", params, runsets.SOURCE_STAGES)
    assert {r.config.stage for r in runs} == {"train-modular-sanity"}
    assert sorted({r.seed for r in runs}) == [0, 42, 100, 101, 102, 103, 104]
    assert len(runs) == 14 < len(wanted("modular", params))
    assert set(runsets.SOURCE_STAGES) <= set(finding_stages(["modular"]))
    # the attention maps the target's claims read are traced from that study's runs
    assert params["modular"]["attention"]["study"] == "sanity"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"lstm-std-sanity-0\.json: missing; run `dvc repro "
                                                r"train-modular-sanity"):
        wanted_runs(params, ["modular"], runsets.SOURCE_STAGES)


def test_the_watched_seeds_run_later_keep_the_deciding_part_and_name_their_own_runs(tmp_path,
                                                                                    monkeypatch):
    from arithrepro.report.results import source_merged

    def origin(commit):
        return {"commit": [commit], "dirty": [False], "cpu": ["AMD EPYC"],
                "cpu_capability": ["AVX512"], "threads": [1], "torch": ["2.13.0+cpu"]}

    claim = {"id": "modular.a", "outcome": "reproduced", "ours": "o", "n": 5, "why": "w"}
    deciding = {"target": "modular-source", "origin": origin("aaaaaaa"), "runs": 10, "cells": [],
                "seeds": [100, 101, 102, 103, 104], "claims": [claim]}
    later = {"target": "modular-source", "origin": origin("bbbbbbb"), "runs": 4, "cells": [],
             "seeds": [], "claims": [], "watched": {"seeds": [0, 42], "claims": [dict(claim, n=2)]}}
    merged = source_merged(deciding, later)
    assert merged["seeds"] == deciding["seeds"] and merged["claims"] == [claim]
    assert merged["watched"]["origin"]["commit"] == ["bbbbbbb"] and merged["watched"]["runs"] == 4
    # a run with deciding seeds replaces the file whole, as does any run over no file
    assert source_merged(merged, deciding) == deciding and source_merged(None, later) == later

    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr(runsets, "other_code",
                        lambda task, origins, **kw: seen.append(origins[0]["commit"]) or "")
    path = tmp_path / runsets.CARRIED["modular-source"]
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(merged))
    ledger = {"source": {"watched": {"seeds": [0, 42], "why": "w"}}}
    first, watched = runsets.carried("modular", ["cpu"], ledger)
    assert seen == ["aaaaaaa", "bbbbbbb"]
    assert "commit aaaaaaa" in first.where and "commit bbbbbbb" in watched.where and watched.watched


def test_the_modular_source_target_trains_this_workspace_before_it_rewrites_a_tracked_file():
    # git_state calls a tree dirty when a tracked file differs, and the target rewrites
    # docs/runsets/modular-source.json: the workspace's own runs must come before that
    recipe, started = [], False
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("modular-source:"):
            started = True
        elif started and line.startswith("\t"):
            recipe.append(line)
        elif started and not line.startswith("\t"):
            break
    repro = [i for i, line in enumerate(recipe) if line.rstrip().endswith("arithrepro repro")]
    rewrite = next(i for i, line in enumerate(recipe) if "--modular-source" in line)
    assert repro and repro[0] < rewrite < repro[-1], recipe
    assert "results --publish" in recipe[-1]


def test_other_code_is_named_against_the_commit_asked_for(monkeypatch):
    # a republished page judges carried files against its own runs' commit, not HEAD's
    monkeypatch.chdir(ROOT)
    page, older, same = ("61533b66c10c534565700da17c535237070d64e9",
                         "d3e14a7", "62969d220744d8a837e2f078dd0aa3d210ade709")
    if subprocess.run(["git", "cat-file", "-e", f"{page}^{{commit}}"], cwd=ROOT).returncode:
        pytest.skip("needs the project's history (a full clone)")
    said = runsets.other_code("modular", [{"commit": older, "dirty": False}], head=page)
    assert said.startswith("from commit d3e14a7: ") and "differ from 61533b6 (" in said
    assert runsets.other_code("modular", [{"commit": same, "dirty": False}], head=page) == ""
