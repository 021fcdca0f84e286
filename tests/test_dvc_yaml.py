"""dvc.yaml's code dependencies are exact: each stage depends on code-deps/<family>.txt, which
`arithrepro code-deps` writes from the import closure of the stage's command (stages/code_deps.py
states the two narrowing rules), and on no source file directly."""

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from arithrepro.imports import closure, graph, project_modules
from arithrepro.codedeps import REGISTRIES, code_files, listing
from arithrepro.stages.code_deps import code_deps, families, family_of

ROOT = Path(__file__).resolve().parents[1]


def stages():
    from dvc.repo import Repo

    return list(Repo(str(ROOT)).index.stages)


def test_every_stage_depends_on_its_familys_code_file_and_on_no_source():
    table = families()
    wrong = {}
    for stage in stages():
        deps = [str(d.def_path) for d in stage.deps if type(d).__name__ != "ParamsDependency"]
        family = family_of(stage.addressing)
        code = [d for d in deps if d.startswith(("arithrepro", "stages", "code-deps"))]
        if family == "code-deps":
            expected = ["arithrepro", "stages"]
        else:
            assert family in table, f"{family}: a stage family code-deps does not know"
            expected = [f"code-deps/{family}.txt"]
        if sorted(code) != expected:
            wrong[stage.addressing] = code
    assert wrong == {}


def test_code_deps_knows_exactly_the_pipelines_families():
    """The stages DVC lists, and those params.yaml's empty lists leave without cells: the
    benchmark's (bench.seeds) and the LLM's (llm.endpoints)."""
    from arithrepro.bench import pairs

    bench = {f"{step}-bench-{t}-{m}" for t, m in pairs() for step in ("train", "evaluate")}
    bench.add("llm-expr")
    assert set(families()) - bench == {family_of(s.addressing) for s in stages()} - {"code-deps"}
    assert bench <= set(families())


def test_a_benchmark_cell_runs_its_models_code_and_no_other():
    """train-bench-looped-lstm builds the LSTM through the pairs adapter: recurrent.py and
    forms.py, not the encoders of the looped task's own grid nor the other token models."""
    files = set(code_files(ROOT, "train", "looped", models=("lstm",)))
    assert {"arithrepro/models/recurrent.py", "arithrepro/models/forms.py",
            "arithrepro/tasks/looped.py", "arithrepro/bench.py"} <= files
    assert not files & {"arithrepro/models/looped.py", "arithrepro/models/retran.py",
                        "arithrepro/models/abacus.py"}


def test_a_cell_runs_its_tasks_and_models_code_only():
    train = set(code_files(ROOT, "train", "expr"))
    assert {"stages/train.py", "stages/common.py", "arithrepro/train/loop.py", "arithrepro/config.py",
            "arithrepro/device.py", "arithrepro/tasks/base.py", "arithrepro/tasks/expr.py",
            "arithrepro/models/transformer.py", "arithrepro/models/retran.py",
            "arithrepro/models/recurrent.py"} <= train
    assert not {"arithrepro/tasks/charlm.py", "arithrepro/models/abacus.py",
                "arithrepro/models/registry.py", "arithrepro/tasks/registry.py",
                "stages/evaluate.py"} & train
    assert not any("/models/" in f for f in code_files(ROOT, "generate-datasets", "expr"))
    # the report's code is not a training stage's, and one task's figures not another's report
    assert not any(f.startswith("arithrepro/report/") for f in train)
    report = set(code_files(ROOT, "render-figures", "expr"))
    assert {"arithrepro/report/expr_figures.py", "arithrepro/report/tables.py"} <= report
    assert "arithrepro/report/modular_figures.py" not in report
    assert "arithrepro/cost.py" in code_files(ROOT, "charlm-compute", "charlm")
    assert "arithrepro/cost.py" not in code_files(ROOT, "train", "charlm")


@pytest.mark.parametrize("task", ["expr", "abacus", "looped"])
def test_an_evaluation_runs_no_training_code(task):
    """A change to the training loop re-runs the runs, and their evaluations only where a run's
    model changed: the evaluate stage writes its record without the runner or the loop."""
    files = set(code_files(ROOT, "evaluate", task))
    assert "arithrepro/records.py" in files
    assert not {"arithrepro/runner.py", "arithrepro/stacking.py"} & files
    # nothing of train/: a task's data is made of arithrepro/batches.py's batches and rows
    assert "arithrepro/batches.py" in files
    assert not {f for f in files if f.startswith("arithrepro/train/")}


@pytest.mark.parametrize("task", ["expr", "abacus", "looped", "modular", "charlm"])
def test_no_run_depends_on_the_findings_or_the_statistics(task):
    """A changed check or test re-runs the results page, never a run or its evaluation."""
    judged = {"arithrepro/stats.py", "arithrepro/claims.py"}
    for command in ("train", "evaluate"):
        files = set(code_files(ROOT, command, task))
        assert not files & judged and not any(f.startswith("arithrepro/findings/") for f in files)
    results = set(code_files(ROOT, "results", None))
    assert judged | {f"arithrepro/findings/{task}.py"} <= results


@pytest.mark.parametrize("rule", ["tasks", "models"])
def test_the_narrowing_rules_matter(rule):
    """Followed everywhere, the registries would make an expr cell depend on charlm's task and
    abacus's model."""
    everything = closure(graph(ROOT), "arithrepro.stages.train")
    assert {"arithrepro.tasks.charlm", "arithrepro.models.abacus"} <= everything
    assert set(REGISTRIES) <= everything


def test_package_inits_import_nothing():
    """code_files leaves them out, so they must not run code of their own."""
    edges, files = graph(ROOT), project_modules(ROOT)
    assert {m: sorted(e) for m, e in edges.items()
            if files[m].name == "__init__.py" and e - {"arithrepro"}} == {}


def test_a_listing_changes_with_a_files_content(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    before = listing(tmp_path, ["a.py"])
    (tmp_path / "a.py").write_text("x = 2\n")
    assert listing(tmp_path, ["a.py"]) != before and before.endswith("  a.py\n")


def test_the_command_writes_a_file_per_family(tmp_path, monkeypatch):
    for folder in ("arithrepro", "stages"):
        shutil.copytree(ROOT / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(code_deps, [])
    assert result.exit_code == 0, result.output
    written = {p.stem: p.read_text() for p in (tmp_path / "code-deps").glob("*.txt")}
    assert set(written) == set(families())
    assert written["train-expr"] == listing(tmp_path, code_files(tmp_path, "train", "expr"))


def test_dvc_yaml_is_what_the_registries_declare():
    from arithrepro.pipeline import as_yaml

    assert (ROOT / "dvc.yaml").read_text() == as_yaml(), "run `arithrepro pipeline`"


def test_every_dependency_is_a_stages_output_or_a_source():
    """A dependency no stage writes would make DVC read a stale or missing file."""
    import subprocess

    every = stages()
    outs = {str(o.def_path) for s in every for o in s.outs}
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    loose = {}
    for stage in every:
        for dep in stage.deps:
            path = str(dep.def_path)
            if type(dep).__name__ == "ParamsDependency" or stage.addressing == "code-deps":
                continue
            written = any(path == o or path.startswith(o + "/") or o.startswith(path + "/")
                          for o in outs)
            if not written and not any(t == path or t.startswith(path + "/") for t in tracked):
                loose.setdefault(stage.addressing, []).append(path)
    assert loose == {}


def test_every_output_names_the_stage_that_writes_it():
    """The one-line errors point at `dvc repro -f -s <stage>`: the stage is found from the
    declarations for every output of every cell."""
    from arithrepro.pipeline import producer

    wrong = {str(o.def_path): (stage.addressing, producer(o.def_path))
             for stage in stages() for o in stage.outs
             if producer(o.def_path) != stage.addressing}
    assert wrong == {}
