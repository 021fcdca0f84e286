"""One switch picks a profile: params.yaml is conf/config.yaml composed with one of
conf/profile/*.yaml and holds that profile's values only, so DVC's stage list follows it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from arithrepro import config
from arithrepro.stages.compose_params import compose_params

ROOT = Path(__file__).resolve().parents[1]


def composed(tmp_path, *overrides) -> dict:
    out = tmp_path / "params.yaml"
    result = CliRunner().invoke(compose_params, [*(a for o in overrides for a in ("-S", o)),
                                                 "--conf", str(ROOT / "conf"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return yaml.safe_load(out.read_text())


def test_params_yaml_is_conf_composed(tmp_path):
    """The committed params.yaml is what `dvc exp run` would compose (no drift between them),
    and says it is generated."""
    assert composed(tmp_path) == yaml.safe_load((ROOT / "params.yaml").read_text())
    assert (ROOT / "params.yaml").read_text().startswith("# Generated from conf/config.yaml")


@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
def test_each_profile_composes_its_own_values_only(tmp_path, profile):
    params = composed(tmp_path, f"profile={profile}")
    assert params["profile"] == profile and "profiles" not in params
    assert set(params) == {"profile", "device", "precision", "compile", "graphs", "cpu", "models", "expr",
                           "abacus", "looped", "modular", "charlm", "bench", "llm", "tuning", "claims"}
    assert params == config.compose([f"profile={profile}"], ROOT / "conf")


def test_a_profile_overrides_key_by_key_and_lists_whole(tmp_path):
    cpu, paper = (composed(tmp_path, f"profile={p}") for p in ("cpu", "paper"))
    assert cpu["expr"]["data"]["max_in"] == 8 and paper["expr"]["data"]["max_in"] == 30
    assert cpu["expr"]["data"]["gen_seed"] == paper["expr"]["data"]["gen_seed"]   # not in cpu.yaml
    assert cpu["expr"]["sizes"] == ["small", "medium"] and paper["expr"]["sizes"] == ["small", "medium", "large"]
    assert cpu["modular"]["studies"]["data"]["sweep"]["r_train"] == [0.6, 0.8]
    assert cpu["models"]["abacus"]["lr"] == 0.01 and paper["models"]["abacus"]["lr"] == 0.0001


def test_paper_profile_is_the_sources_abacus(tmp_path):
    params = composed(tmp_path, "profile=paper")
    assert params["abacus"]["sizes"] == ["l8r2", "l1r16"]
    assert params["models"]["abacus"]["sizes"]["l8r2"] == {"block_layers": 8, "recurrences": 2}
    width = params["abacus"]["model"]
    assert (width["d_model"], width["d_ff"], width["heads"]) == (1024, 2048, 16)
    assert params["abacus"]["eval"]["recurrences"] == [1, 2, 8, 16, 32]
    data = params["abacus"]["data"]
    assert (data["max_digits"], data["grid_max"], max(data["diagonal"])) == (20, 40, 100)
    assert params["expr"]["sizes"] == ["small", "medium", "large"]


def test_an_override_rides_on_the_profile(tmp_path):
    params = composed(tmp_path, "profile=paper", "abacus.seeds=[0,1,2]")
    assert params["abacus"]["seeds"] == [0, 1, 2] and params["abacus"]["sizes"] == ["l8r2", "l1r16"]


def test_an_unknown_profile_or_key_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "params.yaml"
    out.write_text("untouched\n")
    for override, words in (("profile=gpu", "profile=gpu: no such profile (did you mean cpu?); profiles: cpu, paper, smoke"),
                            ("profile=cpuu", "(did you mean cpu?)"),
                            ("bogus.key=1", "bogus.key"),
                            ("models.gpt.lrr=0.1", "(did you mean models.gpt.lr?)"),
                            ("expr.seeds=[0,1", "expr.seeds=[0,1: unbalanced []"),
                            ("expr.seeds='0", "expr.seeds='0: an unclosed quote")):
        result = CliRunner().invoke(compose_params, ["-S", override, "--conf", str(ROOT / "conf"),
                                                     "--out", str(out)])
        assert result.exit_code == 2
        assert result.output.startswith("error: params: ") and words in result.output
        assert result.output.count("\n") == 1
    assert out.read_text() == "untouched\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_a_profile_typed_into_params_yaml_must_be_one_of_conf(tmp_path, monkeypatch):
    """`profile:` labels every record; a misspelt one is refused where conf/profile/ is beside
    the params, with the profiles and the nearest."""
    params = config.compose(["profile=smoke"], ROOT / "conf")
    monkeypatch.chdir(ROOT)
    with pytest.raises(config.ParamsError, match=r"^profile = 'cpuu': expected one of the "
                                                 r"profiles in conf/profile/: cpu, paper, smoke "
                                                 r"\(did you mean cpu\?\)$"):
        config.validate({**params, "profile": "cpuu"})
    config.validate({**params, "profile": "paper"})


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_dvc_lists_the_paper_cells(tmp_path):
    """`dvc stage list` under the paper profile names the paper's abacus cells, no others."""
    for name in ("dvc.yaml", "conf"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, tmp_path / name)
    composed(tmp_path, "profile=paper")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    dvc = str(Path(sys.executable).parent / "dvc")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([dvc, "init", "-q"], cwd=tmp_path, check=True, env=env)
    listed = subprocess.run([dvc, "stage", "list", "--name-only"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, check=True).stdout.split()
    abacus = sorted(s for s in listed if s.startswith("train-abacus@"))
    assert abacus == ["train-abacus@abacus-l1r16-0", "train-abacus@abacus-l8r2-0"]
    assert len([s for s in listed if s.startswith("train-expr@")]) == 3 * 3 * 3


@pytest.mark.parametrize("profile,task,expected", [
    # the sources: expr keeps its best-validation state; abacus (AdamW 1e-4, nothing else
    # stated: AdamW's default decay, constant) and the looped notebook keep the last
    ("paper", "expr", ("lamb", "linear", 0.1, 0.0, True)),
    ("paper", "abacus", ("adamw", "constant", 0.0, 0.01, False)),
    ("paper", "looped", ("adam", "constant", 0.0, 0.0, False)),
    # the cpu profile's measured recipes (README)
    ("cpu", "abacus", ("adamw", "linear", 0.02, 0.0, True)),
    ("cpu", "looped", ("adam", "linear", 0.02, 0.0, True)),
])
def test_each_profile_trains_with_its_stated_loop(profile, task, expected):
    from arithrepro.runner import configure
    from arithrepro.runs import Placement
    from arithrepro.tasks.registry import TASKS

    params = config.compose([f"profile={profile}"], ROOT / "conf")
    model = params[task]["models"][-1]
    run = TASKS[task].config(params, model, params[task]["sizes"][0], seeds=(0,)).runs[0]
    _, cfg = configure(run, Placement("cpu", "fp32", False))
    assert (cfg.optimizer, cfg.schedule, cfg.warmup_frac, cfg.weight_decay,
            cfg.restore_best) == expected


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
def test_dvcs_cells_are_the_tasks_runs(tmp_path, profile):
    """Under every profile, the train cells DVC expands (`arithrepro train --task T [--bench]
    RUN`) are exactly the runs each task lists from the params, and the benchmark's, each once:
    no run without its cell, no cell that names no run."""
    from dvc.repo import Repo

    from arithrepro import bench
    from arithrepro.tasks.registry import TASKS

    for name in ("dvc.yaml", "conf"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, tmp_path / name)
    params = composed(tmp_path, f"profile={profile}")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    cmds = [s.cmd for s in Repo.init(str(tmp_path)).index.stages
            if s.cmd.startswith("arithrepro train ")]
    cells = sorted(tuple(c.split()[3:]) for c in cmds)   # (task, run) of `train --task T RUN`
    runs = sorted([(t, spec.name) for t, task in TASKS.items() for spec in task.runs(params)]
                  + [(t, "--bench", spec.name) for t, task in TASKS.items() if task.grid
                     for spec in bench.runs(task, params)])
    assert cells == runs
    assert len(set(cells)) == len(cells)


def test_on_a_gpu_the_paper_profile_captures_steps_and_trains_seeds_together(tmp_path):
    """The fast forms are the GPU's defaults: `graphs: auto` in the paper profile (the cpu
    profile's params, and so its cells, unchanged) and `arithrepro repro` ensembles a
    configuration's seeds where its stages train on a GPU."""
    from arithrepro.config import resolve_graphs
    from arithrepro.schedule import ensemble_default

    paper, cpu = (composed(tmp_path, f"profile={p}") for p in ("paper", "cpu"))
    assert paper["graphs"] == "auto" and cpu["graphs"] is False
    assert resolve_graphs("auto", "cuda", "bf16") and resolve_graphs("auto", "cuda", "fp32")
    assert not resolve_graphs("auto", "cpu", "fp32")
    assert not resolve_graphs("auto", "cuda", "fp16")               # its scaler reads the device
    assert not resolve_graphs("auto", "cuda", "fp32", world=2)      # DDP: not captured
    assert resolve_graphs(True, "cuda", "fp16")   # asked for: the loop refuses it in one line
    assert not resolve_graphs(True, "cpu", "fp32")
    assert ensemble_default(paper, "cuda", pull=False)
    assert not ensemble_default(paper, "cpu", pull=False)
    assert not ensemble_default(paper, "cuda", pull=True)
    assert not ensemble_default({**paper, "precision": "fp16"}, "cuda", pull=False)
