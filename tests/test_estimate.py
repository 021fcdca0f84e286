"""The estimate command: the loop's validation count, the step clock, batches made without files
that match the real ones, and the projections of every task of the smoke profile."""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from arithrepro import estimate
from arithrepro.stages.estimate import estimate as estimate_command
from arithrepro.tasks.registry import TASKS
from arithrepro.batches import StreamBatches
from arithrepro.train.config import TrainConfig
from tests.helpers import build, run, sources

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("changes", [
    {"val_every": 4},                                   # epoch ends and every 4 steps
    {"val_every": 0},                                   # epoch ends only
    {"val_every": 5, "validate_epochs": False},         # every 5 steps and the end
    {"val_every": 0, "validate_epochs": False},         # the end only
])
def test_validation_count_is_the_loops(tmp_path, changes):
    cfg = TrainConfig(lr=0.01, seed=0, **changes)
    _, result = run(tmp_path, "lstm", cfg, batch_size=16, epochs=2)
    batches, _ = sources(cfg, 16, 2)
    assert estimate.validations(batches, cfg) == len(result["val_curve"])


def test_step_clock_times_exactly_the_timed_steps(monkeypatch):
    """A fake clock that advances 1 s per batch drawn: the timed steps take 1 s each."""
    now = [0.0]
    monkeypatch.setattr(estimate.time, "perf_counter", lambda: now[0])
    x = torch.randint(0, 5, (4, 6))

    def draw(batch_size, g):
        now[0] += 1.0
        return x, x, torch.ones_like(x, dtype=torch.bool)

    net = build("lstm", "small", dropout=0.0)
    batches = StreamBatches(draw, 4, 1000, seed=0)
    assert estimate.time_steps(net, batches, TrainConfig(lr=0.01, seed=0), warmup=2, timed=3) == 1.0
    with pytest.raises(ValueError, match="at least 1"):
        estimate.time_steps(net, batches, TrainConfig(lr=0.01, seed=0), warmup=0, timed=3)


def test_dims_need_no_files_and_match_the_data(tmp_path, smoke_params):
    params = smoke_params
    for name in ("expr", "abacus"):
        TASKS[name].generate(params, tmp_path / name)
        meta = json.loads((tmp_path / name / "meta.json").read_text())
        dims = TASKS[name].dims(params)
        if name == "expr":
            assert dims["max_len"] == max(meta["widths"].values())
        else:
            assert dims["train_run"] == meta["max_digits"] + 1
            assert dims["eval_run"] == max(meta["grid_max"], *meta["diagonal"]) + 1


def test_expr_batches_without_files_have_the_real_runs_shape(tmp_path, smoke_params):
    params = smoke_params
    t = TASKS["expr"]
    t.generate(params, tmp_path)
    real = t.train_batches(params, tmp_path, 0, "cpu")
    made = t.sample_batches(params, 0, "cpu")
    assert (made.steps, made.per_epoch) == (real.steps, real.per_epoch)
    for step in (0, real.steps - 1):
        for a, b in zip(real(step), made(step)):
            assert a.shape == b.shape and a.dtype == b.dtype
    x, y, mask = made(0)
    assert torch.equal(x[:, 1:], y[:, :-1]) and mask.any(1).all()  # next-token targets, answers


def test_estimate_projects_every_task_of_the_smoke_profile(tmp_path, smoke_params):
    out = tmp_path / "estimate.json"
    result = CliRunner().invoke(estimate_command, [
        "--conf", str(ROOT / "conf"), "--profile", "smoke", "--steps", "1",
        "--warmup", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "| smoke |" in result.output and "# Projected training time on cpu, fp32, eager" in result.output
    rows = json.loads(out.read_text())["profiles"]["smoke"]
    by_task = {}
    for r in rows:
        by_task.setdefault(r["task"], []).append(r)
        assert r["timing"]["step_s"] > 0 and r["timing"]["validation_s"] > 0
        assert r["run_s"] == pytest.approx(r["steps"] * r["timing"]["step_s"]
                                           + r["validations"] * r["timing"]["validation_s"])
        assert r["total_s"] == pytest.approx(r["runs"] * r["run_s"])
    params = smoke_params
    e = params["expr"]
    own = {t: [r for r in rows if not r["label"].endswith(" (bench)")] for t, rows in by_task.items()}
    assert sum(r["runs"] for r in own["expr"]) == len(e["models"]) * len(e["sizes"]) * len(e["seeds"])
    assert {r["label"] for r in own["looped"]} == {"standard-notebook", "looped-notebook"}
    assert [r["steps"] for r in by_task["looped"]] == [8] * 6   # its own two, the benchmark's four
    assert [r["validations"] for r in by_task["looped"]] == [2] * 6  # steps 4 and 8
    # the benchmark's cells (the smoke profile runs them on one seed), beside each task's own
    from arithrepro import bench

    assert {r["label"] for r in by_task["looped"]} - {r["label"] for r in own["looped"]} == {
        f"{m}-{params['bench']['sizes'][m]} (bench)" for m in ("gpt", "lstm", "retran", "abacus")}
    assert {r["label"] for r in by_task["charlm"]} == {
        f"{m}-s16" for m in ("rnn", "multi-rnn", "gru", "transformer-1", "transformer-8")}
    assert all(r["steps"] == 6 and r["validations"] == 2 for r in by_task["charlm"])
    # every run of every task, as its train stage lists them
    from arithrepro.tasks.registry import TASKS

    for name, task in TASKS.items():
        cells = task.runs(params) + (bench.runs(task, params) if task.grid else [])
        assert sum(r["runs"] for r in by_task[name]) == len(cells), name
    assert len(TASKS["modular"].runs(params)) == 11


def test_estimate_refuses_an_unknown_profile():
    result = CliRunner().invoke(estimate_command, ["--conf", str(ROOT / "conf"),
                                                   "--profile", "gpu"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"error: params: --profile gpu: not in {ROOT / 'conf'}/profile/; "
        "allowed: cpu, paper, smoke")


def test_grid_cells_are_timed_with_their_own_loop_config(smoke_params):
    """The estimate builds a run through the train stage's own runner.configure: its optimizer and
    progressive loss, and the stream task's own batches."""
    from arithrepro.runner import configure
    from arithrepro.runs import Placement

    params = smoke_params
    run = TASKS["abacus"].config(params, "abacus", "l2r2", seeds=(0,)).runs[0]
    arch, cfg = configure(run, Placement("cpu", "fp32", False))
    assert cfg.progressive and cfg.optimizer == params["abacus"]["train"]["optimizer"]
    assert arch["dims"] == TASKS["abacus"].dims(params)
    batches = TASKS["abacus"].sample_batches(params, 0, "cpu")
    assert isinstance(batches, StreamBatches)
    assert batches.steps == params["abacus"]["train"]["steps"]


def test_the_wall_time_on_several_devices_deals_the_longest_runs_first():
    from arithrepro.estimate import makespan

    assert makespan([5, 4, 3, 3, 3], 1) == 18
    assert makespan([5, 4, 3, 3, 3], 2) == 10          # 5+3+... LPT: {5,3}, {4,3,3}
    assert makespan([9, 1, 1], 4) == 9                 # bound by the longest run
    assert makespan([], 3) == 0


def test_estimate_gives_device_hours_and_the_wall_on_a_node(tmp_path):
    out = tmp_path / "estimate.json"
    result = CliRunner().invoke(estimate_command, [
        "--conf", str(ROOT / "conf"), "--profile", "smoke", "--task", "looped", "--steps", "1",
        "--warmup", "1", "--gpus", "4", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "| profile | runs | jobs | device-hours | longest job | on 4 devices |" in result.output
    made = json.loads(out.read_text())
    runs = [r["run_s"] for r in made["profiles"]["smoke"] for _ in range(r["runs"])]
    assert made["devices"] == 4 and len(runs) == 6 and made["ensemble"] is False
    assert max(runs) <= made["wall_s"]["smoke"] < sum(runs)


def test_ensembles_are_timed_together_and_packed_into_the_slots(tmp_path, monkeypatch):
    """With --ensemble, a configuration's seeds are one job whose step is timed on the ensemble
    runner.train builds; the wall deals the jobs to devices x --per-gpu slots."""
    from arithrepro import projection
    from arithrepro.stacking import Ensemble

    timed = []
    real = projection.time_steps

    def spy(model, *args, **kwargs):
        timed.append(model.members if isinstance(model, Ensemble) else 1)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(projection, "time_steps", spy)
    out = tmp_path / "estimate.json"
    result = CliRunner().invoke(estimate_command, [
        "--conf", str(ROOT / "conf"), "--profile", "smoke", "--task", "looped", "-S",
        "looped.seeds=[0,1,2]", "--steps", "1", "--warmup", "1", "--gpus", "2", "--per-gpu", "2",
        "--ensemble", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "on 2 devices x 2 slots |" in result.output
    assert "each configuration's seeds as one ensemble" in result.output
    made = json.loads(out.read_text())
    rows = made["profiles"]["smoke"]
    own = [r for r in rows if not r["label"].endswith(" (bench)")]
    assert [(r["runs"], r["members"], r["jobs"]) for r in own] == [(3, 3, 1)] * 2
    assert sorted(timed) == [1, 1, 1, 1, 3, 3]    # the benchmark's four cells run one seed
    for r in own:
        assert r["run_s"] == pytest.approx(r["steps"] * r["timing"]["step_s"]
                                           + 3 * r["validations"] * r["timing"]["validation_s"])
        assert r["total_s"] == pytest.approx(r["run_s"])
    jobs = [r["run_s"] for r in rows]
    assert made["per_gpu"] == 2 and made["ensemble"] is True
    assert made["wall_s"]["smoke"] == pytest.approx(estimate.makespan(jobs, 4))


def test_configurations_that_differ_in_rate_decay_or_data_are_timed_as_one_job(tmp_path):
    """The smoke profile's lstm-std at its sanity, data (two r_train) and regularization (two
    weight decays) settings is one ensemble of five; gpt-sin's sizes and batch sizes are not."""
    out = tmp_path / "estimate.json"
    result = CliRunner().invoke(estimate_command, [
        "--conf", str(ROOT / "conf"), "--profile", "smoke", "--task", "modular", "--steps", "1",
        "--warmup", "1", "--ensemble", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = {r["label"]: r for r in json.loads(out.read_text())["profiles"]["smoke"]}
    assert (rows["lstm-std-sanity (+4 trained with it)"]["members"], rows["lstm-std-sanity (+4 trained with it)"]["jobs"]) == (5, 1)
    assert rows["gpt-sin-size.L1d8"]["members"] == rows["gpt-sin-compute.B8"]["members"] == 1
    assert not any(label.startswith("lstm-std-data") for label in rows)


def test_the_static_steps_keys_are_walked_without_training_or_drawing(smoke_params):
    """The paper profile's looped encoder draws its loop count on the host: each count is a
    graph of its own, every one of them met early in the run; the standard one has one."""
    from arithrepro import config
    from arithrepro.projection import shapes

    params = config.compose(["profile=paper", "device=cpu"], str(ROOT / "conf"))
    built = {s.label: s.build() for s in shapes(params, ["looped"]) if not s.config.home}
    state = torch.random.get_rng_state()
    looped = built["looped-notebook"]
    first = estimate.graph_keys(looped.net, looped.cfg, looped.data.batches, 400)
    assert torch.equal(torch.random.get_rng_state(), state)
    extra = params["models"]["looped"]["sizes"]["notebook"]["extra_loops"]
    assert first[0] == 0 and len(first) == extra + 1 and first[-1] < 200
    standard = built["standard-notebook"]
    assert estimate.graph_keys(standard.net, standard.cfg, standard.data.batches, 400) == [0]


def test_under_the_static_step_the_timed_steps_come_after_every_capture(monkeypatch, smoke_params):
    from dataclasses import replace

    from arithrepro.projection import shapes

    windows = []
    real = estimate._Clock

    def clock(batches, start, stop, device):
        windows.append((start, stop))
        return real(batches, start, stop, device)

    monkeypatch.setattr(estimate, "_Clock", clock)
    monkeypatch.setattr(estimate, "graph_keys", lambda *a: [0, 3, 5])
    shape = next(s for s in shapes(smoke_params, ["looped"]) if s.label == "looped-notebook")
    b = shape.build()
    steps = b.data.batches.steps
    estimate.time_steps(b.net, b.data.batches, replace(b.cfg, graphs=True), 1, 1)
    estimate.time_steps(b.net, b.data.batches, b.cfg, 1, 1)   # eager: as asked
    # twice the last new key's step, within the run's length
    assert windows == [(min(12, steps - 2), min(12, steps - 2) + 1), (1, 2)]
