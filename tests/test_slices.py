"""`arithrepro paper-slice` (arithrepro/slices.py): a profile's runs of some tasks made in a
scratch copy that shares the workspace's DVC cache, their verdicts carried in
docs/runsets/paper-slice.json, and every other page reading that file as the profile's run set.
On the smoke run: the slice at smoke size (its cells come back from the run cache), and its
records judged as the paper profile's."""

import json
import shutil

import pytest

from arithrepro import claims, runsets
from arithrepro.pipeline import finding_stages
from arithrepro.checkout import working_dir
from tests.workspace import ROOT, sh

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def test_the_slice_runs_the_stages_that_write_what_the_findings_read():
    assert finding_stages(["modular", "looped"]) == [
        "evaluate-looped", "modular-attention", "train-modular-compute", "train-modular-data",
        "train-modular-orders", "train-modular-regularization", "train-modular-sanity",
        "train-modular-size"]
    assert finding_stages(["charlm"]) == ["charlm-compute", "train-charlm"]


def test_the_slice_at_smoke_size_writes_its_runs_provenance(smoke_first_run, tmp_path):
    here = tmp_path / "workspace"
    shutil.copytree(smoke_first_run.saved / "gpu", here, symlinks=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = sh(["arithrepro", "paper-slice", "--profile", "smoke", "--task", "looped", "-S",
              "looped.seeds=[0]", "--yes", "--workdir", str(scratch)], here)
    assert "paper-slice: docs/runsets/paper-slice.json <- the smoke profile's runs of looped" in out
    data = json.loads((here / "docs" / "runsets" / "paper-slice.json").read_text())
    assert data["target"] == "paper-slice" and data["profile"] == "smoke"
    looped = data["tasks"]["looped"]
    assert set(data["tasks"]) == {"looped"} and looped["seeds"] == [0] and looped["runs"] == 2
    # the commit of the code that trained them: the smoke run's workspace, whose run cache
    # gave the cells back
    head = sh(["git", "rev-parse", "HEAD"], here).strip()
    assert looped["origin"]["commit"] == [head] and len(looped["origin"]["dirty"]) == 1
    assert looped["claims"] == []   # no claim names the smoke profile
    assert not any(scratch.iterdir()), "the scratch copy is removed"


def test_a_bad_profile_or_task_is_refused_before_any_copy(tmp_path):
    from click.testing import CliRunner

    from arithrepro.stages.paper_slice import paper_slice

    with working_dir(ROOT):
        result = CliRunner().invoke(paper_slice, ["--profile", "gpu", "--workdir", str(tmp_path)])
        assert result.exit_code == 2 and "--profile gpu: not in conf/profile/" in result.output
        result = CliRunner().invoke(paper_slice, ["-S", "modular.nope=1", "--workdir", str(tmp_path)])
        assert result.exit_code == 2 and "modular.nope" in result.output
        result = CliRunner().invoke(paper_slice, ["--task", "nope", "--workdir", str(tmp_path)])
        assert result.exit_code == 2 and "nope" in result.output
    assert list(tmp_path.iterdir()) == []


def test_the_slices_verdicts_judge_the_paper_claims_on_every_other_page(smoke_first_run, tmp_path,
                                                                        monkeypatch):
    """The smoke run's looped records judged as if the paper profile had made them: each claim
    the paper profile tests gets its verdict and class, and another page's ledger takes the file
    as the paper run set, with where its runs ran."""
    from arithrepro.config import load
    from arithrepro.slices import slice_study

    here = tmp_path / "workspace"
    shutil.copytree(smoke_first_run.saved / "gpu", here, symlinks=True)
    monkeypatch.setattr(runsets, "other_code", lambda task, origins, **kw: "")
    with working_dir(here):
        params = {**load("params.yaml"), "profile": "paper"}
        data = slice_study(params, ["looped"], "paper-slice")
        ledger = claims.load("looped")
    tested = [c["id"] for c in ledger["claims"] if "paper" in (c.get("test") or {}).get("profiles", [])]
    got = data["tasks"]["looped"]["claims"]
    assert [c["id"] for c in got] == tested and len(tested) == 4
    assert all(c["class"] == claims.SOURCE and c["outcome"] and c["n"] for c in got)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / runsets.SLICES["paper-slice"]
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    (paper,) = runsets.sliced("looped", ["cpu"])
    assert paper.name == "paper" and not paper.watched
    assert paper.where.startswith("`make paper-slice`: commit ") and "seeds 0" in paper.where
    assert runsets.sliced("looped", ["paper"]) == []   # the paper page's own records decide there
    assert runsets.sliced("expr", ["cpu"]) == []
    judged = {v["id"]: v for v in claims.verdicts(ledger, [paper])}
    for c in got:
        assert judged[c["id"]]["outcome"] == c["outcome"]
        assert judged[c["id"]]["judged"][0]["where"] == paper.where


def test_jobs_reach_repro_and_the_judging_follows_in_the_copy(tmp_path, monkeypatch):
    import contextlib

    from click.testing import CliRunner

    from arithrepro import crosscheck, slices
    from arithrepro.stages.paper_slice import paper_slice

    calls = []

    @contextlib.contextmanager
    def copy(root, workdir, prefix, keep):
        yield tmp_path

    monkeypatch.setattr(crosscheck, "scratch", copy)
    monkeypatch.setattr(slices.subprocess, "call", lambda argv, cwd: calls.append((argv, cwd)) or 0)
    with working_dir(ROOT):
        result = CliRunner().invoke(paper_slice, ["--yes", "--jobs", "8", "--task", "looped"])
    assert result.exit_code == 0, result.output
    (repro, where), (judge, _) = calls
    assert repro[3:] == ["repro", "--yes", "-j", "8", "evaluate-looped"] and where == tmp_path
    assert judge[3:5] == ["results", "--slice"] and judge[-2:] == ["--task", "looped"]
    assert "profile: paper" in (tmp_path / "params.yaml").read_text()


def test_a_slice_keeps_the_other_tasks_of_its_profile_and_replaces_another_profiles(tmp_path):
    """GPU windows too short for every task add theirs one by one: looped's slice leaves
    modular's entry of the same profile, and replaces its own."""
    from arithrepro import slices
    from arithrepro.io import ArtifactError

    path = tmp_path / "paper-slice.json"
    assert runsets.slice_file(path) is None
    old = {"target": "paper-slice", "profile": "paper",
           "tasks": {"modular": {"runs": 270}, "looped": {"runs": 1}}}
    path.write_text(json.dumps(old))
    new = {"target": "paper-slice", "profile": "paper", "tasks": {"looped": {"runs": 6}}}
    got = slices.merged(runsets.slice_file(path), new)
    assert got["tasks"] == {"modular": {"runs": 270}, "looped": {"runs": 6}}
    other = {**new, "profile": "smoke"}
    assert slices.merged(runsets.slice_file(path), other) == other
    for text, problem in (("{", "not valid JSON"), ('{"profile": "paper"}', "no key tasks"),
                          ('{"profile": "paper", "tasks": []}', "tasks: expected an object")):
        path.write_text(text)
        with pytest.raises(ArtifactError, match=problem) as err:
            runsets.slice_file(path)
        assert str(path) in str(err.value)


def test_results_refuses_a_broken_slice_file_in_one_line_before_judging(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from arithrepro import slices
    from arithrepro.stages.results import results

    def judged(*args):
        raise AssertionError("judged before the file was checked")

    monkeypatch.setattr(slices, "slice_study", judged)
    path = tmp_path / "paper-slice.json"
    path.write_text("{")
    with working_dir(ROOT):
        result = CliRunner().invoke(results, ["--slice", str(path), "--task", "looped"])
    assert result.exit_code == 1, result.output
    assert str(path) in result.output and "not valid JSON" in result.output
    assert path.read_text() == "{"


def test_the_modular_source_target_is_judged_on_its_own_stages_records(smoke_first_run, tmp_path):
    """`make modular-source`'s judging step on the smoke run's records as if sanity=source had
    made them: only the sanity study's runs are read, and the claims the target tests get their
    verdicts, those on the watched seed 0 apart."""
    from arithrepro.config import load
    from arithrepro.report.results import source_study
    from arithrepro.stages.results import judge

    here = tmp_path / "workspace"
    shutil.copytree(smoke_first_run.saved / "gpu", here, symlinks=True)
    with working_dir(here):
        params = {**load("params.yaml"), "claims": {"targets": ["modular-source"]}}
        data = source_study(judge(params, ["modular"], runsets.SOURCE_STAGES))
        ledger = claims.load("modular")
    assert data["target"] == "modular-source" and data["seeds"] == []
    assert {c["size"].split(".")[0] for c in data["cells"]} == {"sanity"}
    assert data["runs"] == 2 and data["origin"]["commit"] == [sh(["git", "rev-parse", "HEAD"], here).strip()]
    tested = {c["id"] for c in ledger["claims"]
              if "modular-source" in (c.get("test") or {}).get("profiles", [])}
    got = data["watched"]["claims"]
    assert data["watched"]["seeds"] == [0] and got and {c["id"] for c in got} <= tested
    assert all(c["class"] and c["outcome"] for c in got)
