"""`arithrepro repro` projects the training it would run before running it: --dry gives each
training stage's projected time, and a plan beyond --max-hours stops before anything runs. Runs
too short to be worth timing are not timed."""

import re

from tests.workspace import sh


def _smoke(clone, *overrides):
    # looped's runs long enough to be timed (the smoke profile's 8 steps are not)
    sh(["arithrepro", "compose-params", "-S", "profile=smoke", "-S", "looped.train.steps=40",
        *overrides], clone)
    return clone


def test_a_dry_run_projects_each_training_stage_and_runs_nothing(clone):
    out = sh(["arithrepro", "repro", "--dry", "render-figures-looped"], _smoke(clone))
    trains = [line for line in out.splitlines() if line.strip().startswith("would run train-looped@")]
    assert trains and all("(~" in line for line in trains), out
    assert "training projected on this machine:" in out
    assert not (clone / "runs").exists() and not (clone / "data").exists()


def test_a_plan_beyond_max_hours_stops_before_anything_runs(clone):
    out = sh(["arithrepro", "repro", "--max-hours", "0", "render-figures-looped"], _smoke(clone),
             check=False)
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: training projected on this machine at"), out
    assert "beyond --max-hours 0" in last and "--yes" in last
    assert not (clone / "runs").exists() and not (clone / "data").exists()


def test_runs_too_short_to_time_are_counted_and_not_timed(clone):
    out = sh(["arithrepro", "repro", "--dry", "render-figures-looped"],
             _smoke(clone, "-S", "looped.train.steps=31"))
    assert "repro: timing" not in out and "training projected" not in out, out
    assert re.search(r"not timing 2 runs of fewer than 32 steps", out), out
    trains = [line for line in out.splitlines() if line.strip().startswith("would run train-")]
    assert trains and not any("(~" in line for line in trains), out
