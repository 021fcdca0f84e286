"""Damaged files never block a run: a checkpoint that cannot be resumed is set aside and the run
starts over; any other file a stage reads that is cut short or foreign stops the stage with one
line naming it and the command that rebuilds it."""

import io
import json
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

from arithrepro.checkout import working_dir as inside
from arithrepro.io import ArtifactError
from arithrepro.stages.common import rebuild_command
from arithrepro.train.config import TrainConfig
from tests.helpers import (LOOPED, RUN_DIR, TRAIN_LOOPED, cli, ok, run, work_in_copy,
                           write_params)

ROOT = Path(__file__).resolve().parents[1]
REBUILD_TRAIN = "; rebuild it with `dvc repro -f -s train-looped@standard-notebook-0`"
REBUILD_DATA = "; rebuild it with `dvc repro -f -s generate-looped`"


def torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def cut(path: Path) -> None:
    """Cut a file in half, as a copy or a write that stopped part way leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


# --- checkpoints -----------------------------------------------------------------------------

CFG = TrainConfig(lr=0.01, seed=3, val_every=4, checkpoint_every=5)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """An uninterrupted run, and the checkpoint a run killed after step 6 leaves (step 5's)."""
    tmp = tmp_path_factory.mktemp("fresh")
    straight = run(tmp / "straight", "lstm", CFG)
    run(tmp / "halted", "lstm", CFG, halt_after=6)
    return straight, (tmp / "halted" / "checkpoint.pt").read_bytes()


def wrong_optimizer(real: bytes) -> bytes:
    """A checkpoint whose model loads and whose optimizer then fails to."""
    ck = torch.load(io.BytesIO(real), weights_only=False)
    ck["optimizer"]["param_groups"] = []
    return torch_bytes(ck)


DAMAGED = {
    "garbage": (lambda real: b"garbage\n", "unreadable (invalid literal"),
    "truncated": (lambda real: real[:len(real) // 2], "unreadable (PytorchStreamReader"),
    "not a dict": (lambda real: torch_bytes([1, 2, 3]), "not a checkpoint (a list)"),
    "no state": (lambda real: torch_bytes({"fingerprint": "fp", "finished": False}),
                 "no model, optimizer, scheduler, rng, step,"),
    "half applied": (wrong_optimizer, "does not fit this run ("),
}


def resume_from(directory: Path, content: bytes):
    """A run whose checkpoint.pt holds `content`: its (model, result) and the warnings about it."""
    (directory / "checkpoint.pt").parent.mkdir(parents=True, exist_ok=True)
    (directory / "checkpoint.pt").write_bytes(content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = run(directory, "lstm", CFG)
    return out, [str(w.message) for w in caught if "checkpoint.pt" in str(w.message)]


def assert_same_run(a, b) -> None:
    for (k, x), (_, y) in zip(a[0].state_dict().items(), b[0].state_dict().items()):
        assert torch.equal(x, y), k
    assert [r["loss"] for r in a[1]["train_curve"]] == [r["loss"] for r in b[1]["train_curve"]]
    assert a[1]["val_curve"] == b[1]["val_curve"] and a[1]["steps"] == b[1]["steps"] == 12


@pytest.mark.parametrize("kind", DAMAGED)
def test_a_damaged_checkpoint_is_set_aside_and_the_run_starts_over(tmp_path, fresh, kind):
    straight, real = fresh
    make, problem = DAMAGED[kind]
    content = make(real)
    ck = tmp_path / "checkpoint.pt"
    resumed, messages = resume_from(tmp_path, content)
    assert len(messages) == 1, messages
    assert messages[0].startswith(f"{ck}: {problem}") and "\n" not in messages[0]
    assert messages[0].endswith(f"; moved to {ck}.unreadable, training from step 0")
    assert (tmp_path / "checkpoint.pt.unreadable").read_bytes() == content
    assert_same_run(straight, resumed)  # from step 0, exactly as if there was no checkpoint


def test_a_second_damaged_checkpoint_keeps_the_first(tmp_path, fresh):
    resume_from(tmp_path, b"garbage\n")
    _, messages = resume_from(tmp_path, b"more garbage\n")
    assert messages[0].endswith(f"moved to {tmp_path / 'checkpoint.pt.unreadable.1'}, training "
                                "from step 0")
    assert (tmp_path / "checkpoint.pt.unreadable").read_bytes() == b"garbage\n"
    assert (tmp_path / "checkpoint.pt.unreadable.1").read_bytes() == b"more garbage\n"


def test_a_good_checkpoint_still_resumes(tmp_path, fresh):
    straight, real = fresh
    resumed, messages = resume_from(tmp_path, real)
    assert messages == [] and not (tmp_path / "checkpoint.pt.unreadable").exists()
    assert_same_run(straight, resumed)


# --- stages on a tiny workspace (smoke profile) ----------------------------------------------

def one_error(result, starts: str, ends: str) -> None:
    """The stage stopped with exactly one line on stderr: `error: <starts>...<ends>`."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    line = result.stderr.strip()
    assert "\n" not in line, line
    assert line.startswith(f"error: {starts}") and line.endswith(ends), line


def test_train_sets_a_garbage_checkpoint_aside_and_trains_from_step_0(ws, trained):
    (RUN_DIR / "checkpoint.pt").write_text("garbage\n")
    with pytest.warns(UserWarning) as caught:
        ok("train", *TRAIN_LOOPED)
    mine = [str(w.message) for w in caught if "checkpoint.pt" in str(w.message)]
    assert mine == [f"{RUN_DIR / 'checkpoint.pt'}: unreadable (invalid literal for int() with "
                    f"base 10: 'arbage\\n'); moved to {RUN_DIR / 'checkpoint.pt.unreadable'}, "
                    "training from step 0"]
    assert (RUN_DIR / "checkpoint.pt.unreadable").read_text() == "garbage\n"
    assert not (RUN_DIR / "checkpoint.pt").exists()
    before = torch.load(trained / RUN_DIR / "model.pt", weights_only=False)["state_dict"]
    after = torch.load(RUN_DIR / "model.pt", weights_only=False)["state_dict"]
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_evaluate_stops_on_a_truncated_model_naming_its_rebuild(ws):
    target = Path("runs/expr/gpt-small-0/model.pt")  # any task: the file is read before the data
    target.parent.mkdir(parents=True)
    shutil.copyfile(RUN_DIR / "model.pt", target)
    cut(target)
    result = cli("evaluate", "--task", "expr", "gpt-small-0")
    one_error(result, f"{target}: unreadable model file (",
              "; rebuild it with `dvc repro -f -s train-expr@gpt-small-0`")
    assert not Path("metrics").exists() and not Path("plots/expr/eval").exists()


def _saved() -> dict:
    return torch.load(RUN_DIR / "model.pt", weights_only=False)


def _fewer_weights() -> dict:
    saved = _saved()
    saved["state_dict"].pop(next(iter(saved["state_dict"])))
    return saved


def _other_shapes() -> dict:
    saved = _saved()
    saved["size"] = {**saved["size"], "d_model": saved["size"]["d_model"] * 2}
    return saved


FOREIGN = {
    "a list": (lambda: [1, 2, 3], "not a saved model (a list)"),
    "other keys": (lambda: {"weights": torch.zeros(3)},
                   "not a saved model (no model, size, dropout, dims, state_dict)"),
    "unknown model": (lambda: {**_saved(), "model": "mamba"}, "saved model 'mamba' is not one of"),
    "missing weights": (_fewer_weights, "its weights do not fit the standard it declares (Error"),
    "other shapes": (_other_shapes, "its weights do not fit the standard it declares (Error"),
}


@pytest.mark.parametrize("kind", FOREIGN)
def test_evaluate_stops_on_a_foreign_model(ws, kind):
    make, problem = FOREIGN[kind]
    torch.save(make(), RUN_DIR / "model.pt")
    one_error(cli("evaluate", *LOOPED), f"{RUN_DIR / 'model.pt'}: {problem}", REBUILD_TRAIN)
    assert not Path("metrics").exists()


@pytest.mark.parametrize("text, problem", [
    ('{"task": "looped", "model": "stan', "not valid JSON ("),
    ("[]", "expected a JSON object, found list"),
    ('{"task": "looped"}', "no key model, size, seed"),
])
def test_evaluate_stops_on_a_damaged_run_record(ws, text, problem):
    (RUN_DIR / "train.json").write_text(text)
    one_error(cli("evaluate", *LOOPED), f"{RUN_DIR / 'train.json'}: {problem}", REBUILD_TRAIN)
    assert not Path("metrics").exists()


@pytest.mark.parametrize("name, damage, problem", [
    ("valid.parquet", cut, "unreadable Parquet ("),
    ("meta.json", cut, "not valid JSON ("),
    ("meta.json", lambda p: p.write_text('{"variant": "decimal"}'), "no key base"),
    ("valid.parquet", lambda p: pd.DataFrame({"x": [1]}).to_parquet(p), "no column a, b, digits"),
])
def test_train_stops_on_a_damaged_dataset_before_writing(ws, name, damage, problem):
    model = (RUN_DIR / "model.pt").read_bytes()
    damage(Path("data/looped") / name)
    one_error(cli("train", *TRAIN_LOOPED), f"data/looped/{name}: {problem}", REBUILD_DATA)
    assert (RUN_DIR / "model.pt").read_bytes() == model
    assert not (RUN_DIR / "checkpoint.pt").exists()


def test_evaluate_stops_on_a_truncated_evaluation_set(ws):
    cut(Path("data/looped/eval.parquet"))
    result = cli("evaluate", *LOOPED)
    assert result.exit_code == 1 and "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: data/looped/eval.parquet: unreadable")
    assert errors[0].endswith(REBUILD_DATA) and not Path("metrics").exists()


def test_aggregate_names_the_first_missing_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path)
    one_error(cli("aggregate-tables"), "metrics/expr/runs/gpt-small-0.json: missing; ",
              "run `dvc repro evaluate-expr@gpt-small-0`")


def test_aggregate_stops_on_a_truncated_evaluation_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path, expr={"models": ["gpt"], "sizes": ["small"]})
    record = Path("metrics/expr/runs/gpt-small-0.json")
    record.parent.mkdir(parents=True)
    record.write_text('{"task": "expr", "model": "gpt", "si')
    one_error(cli("aggregate-tables"), f"{record}: unreadable run record (",
              "; rebuild it with `dvc repro -f -s evaluate-expr@gpt-small-0`")
    assert not Path("metrics/summary.json").exists()


@pytest.mark.parametrize("path, stage", [
    ("runs/expr/gpt-small-0/model.pt", "train-expr@gpt-small-0"),
    ("runs/looped/looped-notebook-1/train.json", "train-looped@looped-notebook-1"),
    ("data/expr/test.parquet", "generate-expr"),
    ("data/charlm/corpus.txt", "charlm-corpus"),
    ("metrics/expr/runs/gpt-small-0.json", "evaluate-expr@gpt-small-0"),
    ("plots/looped/eval/standard-notebook-0.csv", "evaluate-looped@standard-notebook-0"),
    ("metrics/modular/runs/sanity/gpt-sin-sanity-0.json", "train-modular-sanity@gpt-sin-0"),
    ("runs/modular/data/gpt-sin-data.r0.3-0/model.pt", "train-modular-data@gpt-sin-0.3-0"),
    ("plots/modular/curves/size/gpt-sin-size.L1d8-0.csv", "train-modular-size@gpt-sin-1-8-0"),
    ("runs/charlm/rnn-s16-0/model.pt", "train-charlm@rnn-s16-0"),
    ("metrics/charlm/runs/rnn-s16-0.json", "train-charlm@rnn-s16-0"),
    ("runs/charlm/rnn-s16-0/live/plots/metrics/val/loss.tsv", "train-charlm@rnn-s16-0"),
    ("runs/modular/data/lstm-std-data.r0.3-0/live/plots/metrics/train/loss.tsv",
     "train-modular-data@lstm-std-0.3-0"),
    ("runs/modular/regularization/lstm-std-regularization.wd1e-05-42/train.json",
     "train-modular-regularization@lstm-std-1e-05-42"),
    ("runs/modular/sanity/gpt-sin-sanity-0/model.pt", "train-modular-sanity@gpt-sin-0"),
    ("metrics/summary.csv", "aggregate-tables"),
])
def test_every_read_file_maps_to_the_stage_that_writes_it(path, stage):
    assert rebuild_command(path) == f"dvc repro -f -s {stage}"
    assert rebuild_command(Path.cwd() / path) == f"dvc repro -f -s {stage}"


def test_unknown_files_have_no_rebuild_command():
    assert rebuild_command("runs/modular/data/lstm-std-size.L1d8-0/model.pt") is None
    assert rebuild_command("/elsewhere/model.pt") is None


def test_a_figure_input_without_its_columns_names_the_file(tmp_path):
    from arithrepro.report.plotting import read_csv

    path = tmp_path / "gpt-small-0.csv"
    path.write_text("length,acc")
    with pytest.raises(ArtifactError, match="no column accuracy"):
        read_csv(path, {"length", "accuracy"}, "evaluate")


# --- modular and charlm runs ----------------------------------------------------------------

@pytest.fixture(scope="module")
def studied(tmp_path_factory):
    """The smoke profile's modular sanity runs and one charlm run, trained."""
    ws = tmp_path_factory.mktemp("studied")
    write_params(ws)
    with inside(ws):
        for name in ("lstm-std-sanity-0", "gpt-sin-sanity-0"):
            ok("train", "--task", "modular", name)
        ok("charlm-corpus")
        ok("train", "--task", "charlm", "rnn-s16-0")
    return ws


@pytest.fixture
def studied_ws(studied, tmp_path, monkeypatch):
    return work_in_copy(studied, tmp_path, monkeypatch)


def test_a_study_run_writes_its_model_record_curve_and_series(studied):
    run = studied / "runs/modular/sanity/gpt-sin-sanity-0"
    assert {"model.pt", "train.json", "live"} <= {p.name for p in run.iterdir()}
    assert not (run / "checkpoint.pt").exists()
    record = json.loads((studied / "metrics/modular/runs/sanity/gpt-sin-sanity-0.json").read_text())
    assert (record["model"], record["size"], record["seed"]) == ("gpt-sin", "sanity", 0)
    assert {"val_acc", "val_loss_step", "dt_acc_steps", "param_norm", "provenance"} <= set(record)
    curve = (studied / "plots/modular/curves/sanity/gpt-sin-sanity-0.csv").read_text()
    assert curve.splitlines()[0].startswith("step,")
    assert (run / "live/plots/metrics/train/loss.tsv").is_file()
    charlm = json.loads((studied / "metrics/charlm/runs/rnn-s16-0.json").read_text())
    assert (charlm["model"], charlm["size"], charlm["seq_length"]) == ("rnn", "s16", 16)


def test_an_unknown_run_is_one_line(studied_ws):
    """A run the params do not hold is the command line's mistake: refused as bad params are
    (exit 2), where a damaged input stops the work (exit 1)."""
    result = cli("train", "--task", "modular", "gpt-sin-sanity-7")
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line
    assert line.startswith("error: params: run gpt-sin-sanity-7: not a run of modular in these "
                           "params (lstm-std-sanity-0, ") and line.endswith("lstm-std-regularization.wd1.0-0)")


@pytest.mark.parametrize("name, problem", [
    ("corpus.txt", "its sha256 is not the one in data/charlm/meta.json"),
    ("meta.json", "not valid JSON ("),
])
def test_charlm_stops_on_a_truncated_corpus(studied_ws, name, problem):
    cut(Path("data/charlm") / name)
    one_error(cli("train", "--task", "charlm", "rnn-s16-0"), f"data/charlm/{name}: {problem}",
              "; rebuild it with `dvc repro -f -s charlm-corpus`")


def test_charlm_sample_stops_on_a_truncated_model(studied_ws):
    model = Path("runs/charlm/rnn-s16-0/model.pt")
    cut(model)
    one_error(cli("charlm-sample"), f"{model}: unreadable model file (",
              "; rebuild it with `dvc repro -f -s train-charlm@rnn-s16-0`")
    assert not Path("metrics/charlm/samples.md").exists()


def test_modular_attention_stops_on_a_truncated_record(studied_ws):
    record = Path("metrics/modular/runs/sanity/gpt-sin-sanity-0.json")
    cut(record)
    one_error(cli("modular-attention"), f"{record}: not valid JSON (",
              "; rebuild it with `dvc repro -f -s train-modular-sanity@gpt-sin-0`")
    assert not Path("plots/modular/attention").exists()
