"""One run shape for every task: where a run's files live is said once (arithrepro/runs.py), the
dvc.yaml a task declares names the same files its runs write, every task's runs are built by
runner.build, and every record starts with the run's head and ends with its provenance."""

import ast
import re
from pathlib import Path

import pytest

from arithrepro import config
from arithrepro.runner import build, configure
from arithrepro.runs import Config, Files, Placement, Run, run_name
from arithrepro.tasks.registry import TASKS

ROOT = Path(__file__).resolve().parents[1]
# the names of a run's files: spelled in runs.py only
FILE_NAMES = ("model.pt", "train.json", "checkpoint.pt")


def _code():
    for folder in ("arithrepro", "stages"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name != "runs.py":
                yield path


@pytest.mark.parametrize("path", list(_code()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_but_runs_spells_a_runs_files(path):
    strings = [n.value for n in ast.walk(ast.parse(path.read_text()))
               if isinstance(n, ast.Constant) and isinstance(n.value, str)
               and not (n.value.count("\n") or " " in n.value)]   # not docstrings or messages
    assert not [s for s in strings if any(s.endswith(f) for f in FILE_NAMES)], path.name


@pytest.fixture(scope="module")
def smoke():
    return config.compose(["profile=smoke"], ROOT / "conf")


@pytest.mark.parametrize("task", list(TASKS))
def test_the_train_stage_declares_the_files_its_runs_write(task, smoke, tmp_path):
    """Each run's cell (Run.cell) is a stage of dvc.yaml, as DVC fills its matrix from the
    params, and names the run's own files: what DVC records is what the runner writes, and the
    scheduler finds a stage's run by its name."""
    import shutil

    import yaml
    from dvc.repo import Repo

    from arithrepro import bench

    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    with_bench = {**smoke, "bench": {**smoke["bench"], "seeds": [0]}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(with_bench))
    stages = {s.name: s for s in Repo.init(str(tmp_path), no_scm=True).index.stages}
    runs = [*TASKS[task].runs(with_bench),
            *(bench.runs(TASKS[task], with_bench) if TASKS[task].grid else [])]
    assert runs
    for run in runs:
        assert run.cell in stages, run.cell
        outs = {str(o.def_path) for o in stages[run.cell].outs}
        files = run.files
        assert {str(files.model), str(files.summary), f"{files.live}/metrics.json"} <= outs, run.cell


def test_a_runs_name_and_folders():
    run = Run(Config("modular", "gpt-sin", "size.L3d64", (42,), group="size"), 42)
    assert run.name == run_name("gpt-sin", "size.L3d64", 42) == "gpt-sin-size.L3d64-42"
    f = run.files
    assert f == Files("modular", run.name, "size")
    assert (f.dir.as_posix(), f.model.name, f.record.as_posix(), f.curve.as_posix()) == (
        "runs/modular/size/gpt-sin-size.L3d64-42", "model.pt",
        "metrics/modular/runs/size/gpt-sin-size.L3d64-42.json",
        "plots/modular/curves/size/gpt-sin-size.L3d64-42.csv")
    bench = Run(Config("looped", "gpt", "small", home="bench"), 0).files
    assert (bench.dir.as_posix(), bench.record.as_posix(), bench.evaluation.as_posix()) == (
        "runs/looped/bench/gpt-small-0", "metrics/looped/bench/gpt-small-0.json",
        "plots/looped/bench/gpt-small-0.csv")
    assert run.head() == {"task": "modular", "model": "gpt-sin", "size": "size.L3d64", "seed": 42}


@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_builds_its_runs_the_same_way(task, smoke):
    """runner.build makes the first run of every task (on data made in memory): the model its
    architecture names, initialized from the run's seed, and the loop runner.configure makes."""
    import torch

    t = TASKS[task]
    run = t.runs(smoke)[0]
    where = Placement("cpu", "fp32", False)
    a, b = (build(t, run, smoke, where, trial=True) for _ in range(2))
    for (k, x), y in zip(a.net.state_dict().items(), b.net.state_dict().values()):
        assert torch.equal(x, y), k
    assert a.cfg.seed == run.seed and a.cfg.precision == "fp32"
    if t.grid:
        assert configure(run, where) == (a.arch, a.cfg)
    x, y, mask = a.data.batches(0)
    assert x.shape[0] == y.shape[0] == mask.shape[0] > 0


@pytest.mark.parametrize("task", sorted(TASKS))
def test_a_stage_finds_its_run_by_asking_its_task_once(task, smoke):
    """lookup.find asks the task for the one configuration that trains the named run, built from
    the params themselves; a name no configuration trains is refused, naming the runs there
    are."""
    from arithrepro.lookup import find
    from arithrepro.schema import ParamsError

    t = TASKS[task]
    listed = t.configs(smoke)
    for c in listed:
        for r in c.runs:
            assert t.configs(smoke, run=r.name) == [c]
            assert find(t, smoke, r.name) == r
    assert t.configs(smoke, run="no-such-run-0") == []
    first = listed[0].runs[0].name
    with pytest.raises(ParamsError, match=f"run no-such-run-0: not a run of {task} .*{first}"):
        find(t, smoke, "no-such-run-0")


def test_each_word_of_the_design_has_one_row_and_the_code_keeps_to_it():
    """docs/design.md's "Words" gives each word one meaning; the code names an ensemble's runs
    by that word, never "together" or "lanes" (identifiers and command-line options)."""
    text = (ROOT / "docs" / "design.md").read_text().split("## Words", 1)[1].split("\n## ", 1)[0]
    words = [w.strip() for row in re.findall(r"^\| ([^|]+) \|", text, flags=re.M)[2:]
             for w in row.split(",")]
    assert len(words) == len(set(words)) >= 10, words
    banned = {"together", "lanes", "lane"}
    for path in _code():
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
            a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
            for a in n.args + n.kwonlyargs}
        options = {s for n in ast.walk(tree) if isinstance(n, ast.Constant)
                   and isinstance(n.value, str) and n.value.startswith("--") for s in [n.value]}
        assert not banned & names, (path.name, banned & names)
        assert not {f"--{w}" for w in banned} & options, path.name


def test_a_cell_is_only_dvcs_and_a_size_only_a_models():
    """"cell" names DVC's stage x matrix item only: no class outside the models (a recurrent
    cell) is called one; "size" names a model's size only: nothing the code builds (an
    ensemble, a vocabulary) keeps a count under that name (an ensemble's is `members`, a
    vocabulary's its len())."""
    for path in _code():
        tree = ast.parse(path.read_text())
        if "models" not in path.parts:
            cells = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                     and "cell" in n.name.lower()}
            assert not cells, (path.name, cells)
        sizes = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                 for e in (t.elts if isinstance(t, ast.Tuple) else [t])
                 if (isinstance(e, ast.Attribute) and e.attr == "size")
                 or (isinstance(e, ast.Name) and e.id == "size"
                     and any(isinstance(c, ast.ClassDef) and n in c.body for c in ast.walk(tree)))]
        assert not sizes, (path.name, sizes)
    funcs = {n.name for path in _code() for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.FunctionDef) and n.name == "size"}
    assert not funcs


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.startswith("arithrepro")}


def test_a_run_is_made_by_layers_that_call_only_down():
    """runs.py's values sit below the tasks and the loop, and import no other part; the tasks,
    the loop and the models never reach up to what makes and trains a run (runner.py), or to
    what schedules or reports it (benchmarks/walk.py follows the same path call by call)."""
    package = ROOT / "arithrepro"
    assert _imported(package / "runs.py") == set()
    above = {"arithrepro.runner", "arithrepro.lookup", "arithrepro.schedule", "arithrepro.repro", "arithrepro.cluster",
             "arithrepro.projection", "arithrepro.report", "arithrepro.findings"}
    for part in ("tasks", "train", "models"):
        for path in sorted((package / part).glob("*.py")):
            reached = {m for m in _imported(path) if m.split(".")[:2] != ["arithrepro", part]}
            up = {m for m in reached if any(m == a or m.startswith(a + ".") for a in above)}
            assert not up, f"{path.relative_to(ROOT)} imports {sorted(up)}"
    # a task's data is made of batches.py's pieces, which import no other part: the tasks and
    # the loop meet there, and neither imports the other
    assert _imported(package / "batches.py") == set()
    for path in sorted((package / "tasks").glob("*.py")):
        assert not {m for m in _imported(path) if m.startswith("arithrepro.train")}, path
    for path in sorted((package / "train").glob("*.py")):
        assert not {m for m in _imported(path) if m.startswith("arithrepro.tasks")}, path


def test_the_walk_of_a_run_climbs_nowhere_and_asks_its_task_once_per_phase(ws):
    """benchmarks/walk.py follows a looped run from its train stage to its record, call by call:
    no call climbs back up into a part waiting lower on the stack; lookup and the runner are
    entered once each, train/ twice (a run's TrainConfig, and fit_copies); the task once per
    phase: the configuration, its data, the sampler every step and the scores."""
    from benchmarks.walk import walk
    from tests.helpers import TRAIN_LOOPED

    entries, climbs, order = walk(TRAIN_LOOPED)
    assert climbs == []
    assert entries["arithrepro.lookup"] == entries["arithrepro.runner"] == 1
    assert {(c, f) for c, m, f in order if m == "arithrepro.train"} == {
        ("arithrepro.runner", "__create_fn__.<locals>.__init__"),
        ("arithrepro.runner", "fit_copies")}
    assert [(c, f) for c, m, f in order if m == "arithrepro.tasks"] == [
        ("arithrepro.lookup", "Task.configs"), ("arithrepro.runner", "GridTask.data"),
        ("arithrepro.batches", "LoopedTask.train_sampler.<locals>.draw"),
        ("arithrepro.runner", "Task.scores")]
