"""The queued-grid recipe of docs/running.md on the smoke profile, in a clone of its own (tests/workspace.py):
with `pytest -n 2 --dist loadfile` (make test) it runs beside test_pipeline.py's scenarios."""

import json
import re
import shutil
import time

import psutil
import pytest

from tests.workspace import drained_queue, queue_gone, queue_workers, sh, start_queue

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def queue_status(cwd) -> dict:
    """`dvc queue status` as {experiment name: status}, after waiting for the queue to drain."""
    rows = [line.split() for line in drained_queue(cwd).splitlines()]
    return {row[1]: row[-1] for row in rows if len(row) >= 4 and row[0] != "Task"}


def worker_devices(cwd, want: list[str], timeout: float = 30) -> list[str]:
    """The CUDA_VISIBLE_DEVICES the queue workers running for the repository at `cwd` have (a
    worker's pool processes carry its command line and environment), once they are `want` or
    after `timeout` s: `dvc queue start` returns before the process it spawns has started its
    worker."""
    end = time.monotonic() + timeout
    while True:
        devices = set()
        for proc in queue_workers(cwd):
            try:
                if "queue-worker" in " ".join(proc.cmdline()):
                    devices.add(proc.environ().get("CUDA_VISIBLE_DEVICES", ""))
            except psutil.NoSuchProcess:   # an experiment's command that has just ended
                pass
        if sorted(devices) == want or time.monotonic() > end:
            return sorted(devices)
        time.sleep(0.2)


def queue(cwd, *args) -> str:
    """Queue one experiment; returns its name."""
    # --no-hydra: the queued cell runs with the workspace's params.yaml as it is
    out = sh(["dvc", "exp", "run", "--queue", "--no-hydra", *args], cwd)
    return re.search(r"Queued experiment '([^']+)'", out).group(1)


def test_queued_cells_retry_and_come_back_from_the_run_cache(clone):
    """The queued-grid recipe of docs/running.md: cells queued as experiments, one worker per device,
    a failed cell re-queued under its name, a finished one re-queued at no cost, and all of them
    collected in the workspace by `dvc repro` without training."""
    cells = [f"train-expr@lstm-{size}-0" for size in ("small", "large")]
    # The workspace's params and data first: queued experiments start from the workspace.
    sh(["dvc", "exp", "run", "-S", "profile=smoke", "-S", "models.lstm.lr=0.004",
        "generate-expr"], clone)
    try:
        queue(clone, "-n", "expr-lstm-small-0", cells[0])
        queue(clone, "-n", "expr-lstm-large-0", "-S", "models.lstm.lr=-1", cells[1])  # fails
        for k in (1, 2):  # worker k is added by `-j k`; it keeps the environment it starts with
            start_queue(clone, k, CUDA_VISIBLE_DEVICES=str(k - 1))
        assert worker_devices(clone, ["0", "1"]) == ["0", "1"]   # both at once, one device each
        status = queue_status(clone)
        assert [status[f"expr-lstm-{s}-0"] for s in ("small", "large")] == ["Success", "Failed"], \
            status
        assert "error: params: models.lstm.lr = -1: expected a number > 0" in \
            sh(["dvc", "queue", "logs", "expr-lstm-large-0"], clone)

        # A failed cell is re-queued under its own name; a finished one again costs nothing.
        queue_gone(clone)
        queue(clone, "-n", "expr-lstm-large-0", cells[1])
        again = queue(clone, cells[0])
        start_queue(clone)
        status = queue_status(clone)
        assert status["expr-lstm-large-0"] == "Success" and status[again] == "Success", status
        assert f"Stage '{cells[0]}' is cached - skipping run" in sh(["dvc", "queue", "logs", again], clone)
        assert "expr-lstm-small-0" in sh(["dvc", "exp", "show", "--no-pager", "--csv"], clone)
    finally:
        sh(["dvc", "queue", "stop"], clone, check=False)

    # Collected: every queued cell's outputs come from the run cache, nothing trains.
    for cell in cells:
        shutil.rmtree(clone / "runs" / "expr" / cell.split("@")[1], ignore_errors=True)
    out = sh(["dvc", "repro", *cells], clone)
    assert "Running stage" not in out, out
    assert all(f"Stage '{cell}' is cached - skipping run" in out for cell in cells), out
    for cell in cells:
        record = json.loads((clone / "runs" / "expr" / cell.split("@")[1] / "train.json").read_text())
        assert record["model"] == "lstm" and record["steps"] > 0
