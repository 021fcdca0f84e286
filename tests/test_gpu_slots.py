"""`arithrepro repro` on a machine with several GPUs, simulated on the CPU: a slot per GPU (or
several), each stage seeing its slot's GPU only, no GPU with more stages at once than its slots."""

import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from arithrepro.repro import reproduce
from arithrepro.slots import gpu_slots
from tests.workspace import sh


def test_slots_are_dealt_per_gpu_or_round_them():
    assert gpu_slots(["0", "1"], 2) == ["0", "1", "0", "1"]
    assert gpu_slots(["0", "1", "2"], 1, slots=4) == ["0", "1", "2", "0"]
    assert gpu_slots([], 3) == []


def _project(root: Path, stages: int) -> None:
    """Stages that record the GPUs they see and when they ran, each sleeping long enough that
    the slots overlap."""
    record = ("import os, time; t0 = time.time(); time.sleep(0.6); "
              "open('seen${item.n}.txt', 'w').write("
              "os.environ.get('CUDA_VISIBLE_DEVICES', '') + ' %f %f' % (t0, time.time()))")
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"use": {
        "matrix": {"n": list(range(stages))}, "cmd": f"python -c \"{record}\"",
        "outs": ["seen${item.n}.txt"]}}}))


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("per_gpu", [1, 2])
def test_each_stage_sees_one_gpu_and_no_gpu_runs_more_than_its_slots(tmp_path, monkeypatch, per_gpu):
    sh(["git", "init", "-q"], tmp_path)
    sh(["dvc", "init", "-q"], tmp_path)
    _project(tmp_path, 8)
    sh(["git", "add", "-A"], tmp_path)
    sh(["git", "commit", "-qm", "pipeline"], tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    lines = []
    assert reproduce(None, False, echo=lines.append, workers_in_process=False,
                     gpus=["3", "7"], per_gpu=per_gpu) == 0
    assert f"{2 * per_gpu} at a time" in lines[0] and "each on one GPU of 3, 7" in lines[0]
    runs = []
    for n in range(8):
        gpu, start, end = (tmp_path / f"seen{n}.txt").read_text().split()
        runs.append((gpu, float(start), float(end)))
    assert {gpu for gpu, _, _ in runs} == {"3", "7"}
    for gpu in ("3", "7"):
        mine = [(s, e) for g, s, e in runs if g == gpu]
        most = max(sum(s <= t < e for s, e in mine) for t, _ in mine)
        assert most <= per_gpu, (gpu, most)
