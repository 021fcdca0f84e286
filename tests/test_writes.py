"""Writes the system refuses (no space, no permission, a file-size limit) stop the stage with one
line naming the file and the cause, and leave the file as it was: the previous good checkpoint,
model, record or report stays whole, and no temporary file is left beside it."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from arithrepro.io import WriteError, write_json
from tests.helpers import LOOPED, RUN_DIR, TRAIN_LOOPED, cli, ok

ROOT = Path(__file__).resolve().parents[1]


def refuse(monkeypatch, name: str, code: int, after: int = 0) -> None:
    """The rename that would put file `name` in place fails with `code` (ENOSPC, EACCES), as the
    system refuses a write; the first `after` such renames succeed."""
    real, seen = os.replace, []

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == name:
            seen.append(dst)
            if len(seen) > after:
                raise OSError(code, os.strerror(code), str(src))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


def one_error(result, starts: str, ends: str) -> None:
    """The stage stopped with one error line (after a training's progress bar, if any)."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"error: {starts}") and errors[0].endswith(ends), errors[0]


def no_temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*.tmp")]


def test_a_refused_write_names_the_file_and_keeps_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "record.json"
    write_json(path, {"good": True})
    refuse(monkeypatch, "record.json", errno.ENOSPC)
    with pytest.raises(WriteError) as caught:
        write_json(path, {"good": False})
    assert str(caught.value) == (f"cannot write {path}: No space left on device; "
                                 "the previous file is kept")
    assert json.loads(path.read_text()) == {"good": True} and not no_temporaries(tmp_path)


def test_a_refused_first_write_says_nothing_was_written(tmp_path, monkeypatch):
    refuse(monkeypatch, "model.pt", errno.EACCES)
    from arithrepro.io import save_torch
    with pytest.raises(WriteError, match=r"model.pt: Permission denied; nothing was written$"):
        save_torch(tmp_path / "model.pt", {"w": torch.zeros(3)})
    assert list(tmp_path.iterdir()) == []


# Every writer under a real limit the kernel enforces (RLIMIT_FSIZE: a write past it fails with
# EFBIG, as one past a full disk fails with ENOSPC), in a process of its own.
LIMITED = r"""
import json, resource, signal, sys
from pathlib import Path
import pandas as pd, torch
from arithrepro import io
from arithrepro.report.plotting import pyplot, save
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
out, results = Path(sys.argv[1]), {}

def figure(path):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot(range(1000), [i * i for i in range(1000)])
    save(plt, fig, path)

writers = {"model.pt": lambda p: io.save_torch(p, {"w": torch.zeros(20000)}),
           "train.json": lambda p: io.write_json(p, {"x": "y" * 20000}),
           "eval.parquet": lambda p: io.write_frame(p, pd.DataFrame({"a": range(20000)})),
           "eval.csv": lambda p: io.write_frame(p, pd.DataFrame({"a": range(20000)})),
           "table.md": lambda p: io.write_text(p, "| a |\n" * 5000),
           "figure.png": figure}
for name in writers:
    (out / name).write_bytes(b"previous")
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
for name, write in writers.items():
    try:
        write(out / name)
        results[name] = "written"
    except io.WriteError as err:
        results[name] = str(err)
print(json.dumps(results))
"""


def test_every_writer_under_a_real_size_limit_stops_and_keeps_the_previous_file(tmp_path):
    proc = subprocess.run([sys.executable, "-c", LIMITED, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.splitlines()[-1])
    assert len(results) == 6
    for name, said in results.items():
        assert said == f"cannot write {tmp_path / name}: File too large; the previous file is kept"
        assert (tmp_path / name).read_bytes() == b"previous", name
    assert not no_temporaries(tmp_path)


# --- stages ----------------------------------------------------------------------------------

def test_a_refused_checkpoint_stops_training_and_the_last_one_resumes(ws, trained, monkeypatch):
    """The second checkpoint (step 8 of 8) cannot be written: one line, the first (step 4) stays,
    and the plain re-run resumes from it to the model an uninterrupted run trains."""
    (RUN_DIR / "model.pt").unlink()
    real = os.replace
    refuse(monkeypatch, "checkpoint.pt", errno.ENOSPC, after=1)
    one_error(cli("train", *TRAIN_LOOPED),
              f"cannot write {RUN_DIR / 'checkpoint.pt'}: No space left on device",
              "the previous file is kept")
    kept = torch.load(RUN_DIR / "checkpoint.pt", weights_only=False)
    assert kept["step"] == 4 and not (RUN_DIR / "model.pt").exists()
    monkeypatch.setattr(os, "replace", real)
    ok("train", *TRAIN_LOOPED)
    before = torch.load(trained / RUN_DIR / "model.pt", weights_only=False)["state_dict"]
    after = torch.load(RUN_DIR / "model.pt", weights_only=False)["state_dict"]
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not no_temporaries(Path("."))


@pytest.mark.parametrize("args, target, code, cause", [
    (["train", *TRAIN_LOOPED], RUN_DIR / "model.pt", errno.EACCES, "Permission denied"),
    (["train", *TRAIN_LOOPED], RUN_DIR / "train.json", errno.ENOSPC, "No space left on device"),
    (["evaluate", *LOOPED], Path("metrics/looped/runs/standard-notebook-0.json"), errno.ENOSPC,
     "No space left on device"),
    (["render-figures", "--task", "looped"], Path("plots/looped/accuracy_vs_digits.png"), errno.EACCES,
     "Permission denied"),
    (["render-figures", "--task", "looped"], Path("metrics/looped.md"), errno.ENOSPC,
     "No space left on device"),
])
def test_a_refused_output_stops_the_stage_and_keeps_the_previous_file(
        ws, monkeypatch, args, target, code, cause):
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["looped"]["models"] = ["standard"]   # the cell the workspace trained
    Path("params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))
    ok("evaluate", *LOOPED)
    ok("render-figures", "--task", "looped")
    before = target.read_bytes()
    refuse(monkeypatch, target.name, code)
    one_error(cli(*args), f"cannot write {target}: {cause}", "the previous file is kept")
    assert target.read_bytes() == before
    assert not no_temporaries(Path("."))
