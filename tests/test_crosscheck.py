"""`arithrepro crosscheck` on the smoke run: the looped findings again with torch held to its
DEFAULT kernels and one thread, in a scratch copy that shares the workspace's DVC cache."""

import json
import os
import re
import shutil
import subprocess

import pytest

from arithrepro.findings.registry import FINDINGS
from tests.workspace import sh

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def test_the_findings_on_another_capability_beside_the_workspaces(smoke_first_run, tmp_path):
    here = tmp_path / "workspace"
    shutil.copytree(smoke_first_run.saved / "gpu", here, symlinks=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    command = ["arithrepro", "crosscheck", "--task", "looped", "--capability", "default",
               "--threads", "1", "--workdir", str(scratch)]
    out = sh(command, here)
    assert "crosscheck: looped -> docs/crosscheck/default-t1.json, docs/crosscheck.md" in out
    data = json.loads((here / "docs" / "crosscheck" / "default-t1.json").read_text())
    assert data["setting"] == {"capability": "default", "threads": 1, "set": []}
    assert data["origin"]["cpu_capability"] == ["DEFAULT"] and data["origin"]["threads"] == ["1"]
    assert [f["claim"] for f in data["tasks"]["looped"]["findings"]] == [
        f.claim for f in FINDINGS["looped"]]
    page = (here / "docs" / "crosscheck.md").read_text()
    # a column beside the workspace's own (and beside the settings the repository holds already)
    header = next(line for line in page.splitlines() if line.startswith("| finding | this workspace |"))
    assert header.endswith(" default-t1 |")
    assert all(f.claim in page for f in FINDINGS["looped"])
    assert not any(scratch.iterdir()), "the scratch copy is removed"
    # the workspace's own cells untouched; only the results page reads the new setting
    assert data["profile"] == "smoke" and data["tasks"]["looped"]["seeds"] == [0]
    status = sh(["dvc", "status"], here)
    assert re.findall(r"^(\S.*):$", status, flags=re.M) == ["results"], status
    assert "docs/crosscheck" in status

    # Again: its cells are other DVC cells than the workspace's, so they come back from the
    # shared run cache instead of training.
    sh([*command, "--keep"], here)
    (kept,) = scratch.iterdir()
    log = (kept / "workspace" / "logs" / "repro" / "train-looped-looped-notebook-0.log").read_text()
    assert "is cached - skipping run" in log
    assert json.loads((here / "docs" / "crosscheck" / "default-t1.json").read_text()) == data


def test_without_the_workspaces_runs_it_stops_before_any_work(clone, tmp_path):
    sh(["arithrepro", "compose-params", "-S", "profile=smoke"], clone)
    out = sh(["arithrepro", "crosscheck", "--task", "looped", "--workdir", str(tmp_path)], clone,
             check=False)
    assert "error: metrics/looped/runs/" in out and "missing; run `dvc repro" in out
    assert not any(tmp_path.iterdir())


def test_a_setting_with_changed_params_is_named_and_listed_as_such():
    from arithrepro.crosscheck import label, page

    plain = {"capability": "avx2", "threads": 2, "set": []}
    recipe = {**plain, "set": ["abacus.train.steps=1500"]}
    assert label(plain) == "avx2-t2"
    assert label(recipe).startswith("avx2-t2-") and label(recipe) != label(
        {**plain, "set": ["abacus.train.steps=1000"]})
    own = {"origin": {"machine": ["a CPU"], "cpu_capability": ["AVX512"], "threads": ["1"]},
           "tasks": {"abacus": {"findings": [{"claim": "c", "holds": True, "measured": "m", "n": 5}]}}}
    other = {"setting": recipe, "origin": {"machine": ["a CPU"], "cpu_capability": ["AVX2"],
                                           "threads": ["2"]},
             "tasks": {"abacus": {"findings": [{"claim": "c", "holds": False, "measured": "n", "n": 1}]}}}
    text = page(own, [other])
    assert f"| {label(recipe)} | a CPU | AVX2 | 2 | `abacus.train.steps=1500` |" in text
    assert "| c | reproduced: m | **not reproduced**: n |" in text   # records written before outcomes


def test_the_readmes_block_gives_each_findings_verdicts_and_whether_they_agree(tmp_path, monkeypatch):
    from arithrepro import crosscheck

    finding = lambda claim, holds, n=5: {"claim": claim, "holds": holds, "measured": "9.9 %", "n": n}
    own = {"origin": {"machine": ["AMD EPYC"]},
           "tasks": {"abacus": {"findings": [finding("learned", True), finding("carries", True)],
                                "commit": "aaaaaaa"},
                     "expr": {"findings": [finding("retran wins", True)], "commit": "aaaaaaa"}}}
    other = {"setting": {"capability": "avx2", "threads": 1, "set": []},
             "origin": {"machine": ["AMD EPYC"]},
             "tasks": {"abacus": {"findings": [finding("learned", True), finding("carries", False)]}}}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs" / "crosscheck").mkdir(parents=True)
    (tmp_path / "docs" / "crosscheck" / "avx2-t1.json").write_text(json.dumps(other))
    readme = f"# title\n\n{crosscheck.README_START}\nold\n{crosscheck.README_END}\n\nrest\n"
    (tmp_path / "README.md").write_text(readme)
    written = crosscheck.write(own, None)
    assert [str(p) for p in written] == ["docs/crosscheck.md", "README.md"]
    text = (tmp_path / "README.md").read_text()
    assert text.startswith("# title\n\n" + crosscheck.README_START) and text.endswith(
        crosscheck.README_END + "\n\nrest\n")
    assert "1 of 2 findings give the same verdict in every setting, on AMD EPYC" in text
    assert "| abacus | learned | reproduced | reproduced | yes |" in text
    assert "| abacus | carries | reproduced | **not reproduced** | **no** |" in text
    assert "retran wins" not in text and "9.9" not in text   # a task not checked; no numbers
    assert "Commits: this workspace: abacus at aaaaaaa. avx2-t1: abacus at not recorded." in text
    assert "Commit: this workspace aaaaaaa; avx2-t1 not recorded" in (tmp_path / "docs" / "crosscheck.md").read_text()

    # No block in the README: it is left as it is; no other setting: the block says so.
    (tmp_path / "README.md").write_text("# title\n")
    assert [str(p) for p in crosscheck.write(own, None)] == ["docs/crosscheck.md"]
    assert (tmp_path / "README.md").read_text() == "# title\n"
    assert "No other setting checked yet." in crosscheck.readme_block(own, [])


def test_a_later_check_of_some_tasks_keeps_the_settings_other_tasks():
    from arithrepro.crosscheck import merged

    setting = {"capability": "avx2", "threads": 1, "set": []}
    earlier = {"setting": setting, "origin": {"machine": ["A"], "threads": ["1"]},
               "tasks": {"abacus": {"commit": "old"}, "expr": {"commit": "old"}}}
    later = {"setting": setting, "origin": {"machine": ["B"], "threads": ["1"]},
             "tasks": {"expr": {"commit": "new"}}}
    assert merged(earlier, later) == {"setting": setting,
                                      "origin": {"machine": ["A", "B"], "threads": ["1"]},
                                      "tasks": {"abacus": {"commit": "old"}, "expr": {"commit": "new"}}}
    assert merged(None, later) == later


def test_the_page_shows_every_task_on_record_whose_records_the_workspace_has(tmp_path, monkeypatch):
    from arithrepro import crosscheck

    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs" / "crosscheck").mkdir(parents=True)
    (tmp_path / "docs" / "crosscheck" / "avx2-t1.json").write_text(json.dumps(
        {"setting": {}, "origin": {}, "tasks": {"abacus": {}, "looped": {}, "expr": {}}}))
    assert crosscheck.on_record() == ["abacus", "expr", "looped"]
    reports = {"looped": {"findings": [], "commit": "bbbbbbb"}}

    def task_report(params, tasks):
        (task,) = tasks
        if task not in reports:
            raise FileNotFoundError(f"metrics/{task}/runs/x.json: missing; run `dvc repro`")
        return {"origin": {}, "tasks": {task: reports[task]}}

    monkeypatch.setattr(crosscheck, "task_report", task_report)
    own = {"origin": {}, "tasks": {"expr": {"commit": "aaaaaaa"}}}
    assert crosscheck.with_tasks_on_record(own, {})["tasks"] == {
        "expr": {"commit": "aaaaaaa"}, "looped": {"findings": [], "commit": "bbbbbbb"}}


def test_the_commit_is_marked_changed_only_when_what_the_runs_are_made_of_changed(tmp_path):
    from arithrepro.checkout import IDENTITY
    from arithrepro.crosscheck import head

    git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True,
                                    env={**IDENTITY, **os.environ})
    (tmp_path / "arithrepro").mkdir()
    (tmp_path / "arithrepro" / "a.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("results\n")
    git("init", "-q"); git("add", "-A"); git("commit", "-qm", "c")
    sha = head(tmp_path)
    assert len(sha) == 7 and "+" not in sha
    (tmp_path / "README.md").write_text("other results\n")
    assert head(tmp_path) == sha
    (tmp_path / "arithrepro" / "a.py").write_text("x = 2\n")
    assert head(tmp_path) == sha + "+changes"
