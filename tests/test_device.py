"""Device and precision: resolution and its errors, autocast training on the CPU, the losses
read back in batches (no host sync per step), and torch.compile giving the eager run's losses."""

from pathlib import Path

import pytest
import torch

from arithrepro import config
from arithrepro.device import autocast, resolve_device, resolve_precision, to_device
from arithrepro.train.config import TrainConfig
from arithrepro.models.registry import MODELS
from tests.helpers import SIZES, build, run

CUDA = torch.cuda.is_available()


def test_auto_picks_what_torch_sees():
    assert resolve_device("auto") == ("cuda" if CUDA else "cpu")
    assert resolve_device("cpu") == "cpu"
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("bf16", "cpu") == "bf16"


def test_without_a_gpu_driver_auto_is_the_cpu_and_torch_is_not_imported(tmp_path, monkeypatch):
    """`device: auto` resolves to the CPU without `import torch` where no driver is installed;
    where one is, torch decides."""
    import subprocess
    import sys

    from arithrepro import device

    code = ("import sys; from arithrepro import device as d; d.GPU_DRIVER_PATHS = (); "
            "print(d.resolve_device('auto'), d.visible_gpus(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
                         ).stdout.split()
    if sys.platform.startswith("linux"):
        assert out == ["cpu", "[]", "False"], out
    present = tmp_path / "nvidiactl"
    present.write_text("")
    monkeypatch.setattr(device, "GPU_DRIVER_PATHS", (str(present),))
    assert not device.no_gpu_driver()
    assert resolve_device("auto") == ("cuda" if CUDA else "cpu")


@pytest.mark.parametrize("bf16", [True, False])
def test_auto_on_a_gpu_follows_each_tasks_source(monkeypatch, bf16):
    """Only the abacus source trained in mixed precision; every other task stays fp32 on a GPU."""
    from arithrepro.tasks.registry import TASKS

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    got = {t: resolve_precision("auto", "cuda", task.precision) for t, task in TASKS.items()}
    mixed = "bf16" if bf16 else "fp16"
    assert got == {"expr": "fp32", "abacus": mixed, "looped": "fp32", "modular": "fp32",
                   "charlm": "fp32"}
    assert resolve_precision("bf16", "cuda", "fp32") == "bf16"   # an explicit choice wins


@pytest.mark.skipif(CUDA, reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu_is_one_line():
    with pytest.raises(config.ParamsError, match=r"^device = 'cuda': torch sees no CUDA device"):
        resolve_device("cuda")


def test_fp16_on_the_cpu_is_refused():
    with pytest.raises(config.ParamsError, match="precision = 'fp16'"):
        resolve_precision("fp16", "cpu")


@pytest.mark.parametrize("key,value,message", [
    ("device", "gpu", "device = 'gpu': expected one of auto, cpu, cuda"),
    ("precision", "fp8", "precision = 'fp8': expected one of auto, fp32, bf16, fp16"),
    ("compile", "yes", "compile = 'yes': expected false, true, reduce-overhead or max-autotune"),
])
def test_params_keys(key, value, message):
    params = config.load("params.yaml")
    params[key] = value
    with pytest.raises(config.ParamsError, match=message):
        config.validate(params)


def test_autocast_runs_matmuls_in_the_lower_precision():
    a = torch.randn(4, 4)
    with autocast("cpu", "bf16"):
        assert (a @ a).dtype == torch.bfloat16
    with autocast("cpu", "fp32"):
        assert (a @ a).dtype == torch.float32


def test_host_batches_reach_the_device_unchanged():
    x, y = torch.arange(12).view(3, 4), torch.rand(3, 4)
    a, b = to_device("cpu", x, y)
    assert torch.equal(a, x) and torch.equal(b, y) and a.device.type == "cpu"
    if torch.cuda.is_available():  # pinned and copied without blocking
        a, b = to_device("cuda", x, y)
        assert torch.equal(a.cpu(), x) and torch.equal(b.cpu(), y) and a.is_cuda


def test_bf16_training_on_the_cpu_follows_fp32(tmp_path):
    cfg = TrainConfig(lr=0.01, seed=1, val_every=4)
    _, full = run(tmp_path / "a", "gpt", cfg)
    model, half = run(tmp_path / "b", "gpt", TrainConfig(lr=0.01, seed=1, val_every=4, precision="bf16"))
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay fp32
    a = [r["loss"] for r in full["train_curve"]]
    b = [r["loss"] for r in half["train_curve"]]
    assert len(a) == len(b) and a != b
    assert max(abs(x - y) for x, y in zip(a, b)) < 0.1


def test_losses_read_back_in_batches_are_the_per_step_losses(tmp_path):
    _, every = run(tmp_path / "a", "lstm", TrainConfig(lr=0.01, seed=2, sync_every=1))
    _, batched = run(tmp_path / "b", "lstm", TrainConfig(lr=0.01, seed=2, sync_every=1000))
    assert every["train_curve"] == batched["train_curve"]
    assert [r["step"] for r in batched["train_curve"]] == list(range(1, 13))


# gpt: torchtune's rotary embeddings. The LSTM's graph, unrolled over every time step, takes
# inductor over two minutes to compile with an empty cache (a fresh machine) on two cores: it runs
# where the machine has a GPU (benchmarks/gpu_checks.sh runs this file there, on many cores).
@pytest.mark.parametrize("name", [
    "gpt", pytest.param("lstm", marks=pytest.mark.skipif(not CUDA, reason="long compile: GPU machines"))])
def test_compiled_training_gives_the_eager_losses(tmp_path, name):
    cfg = TrainConfig(lr=0.01, seed=4)
    # one block of the small size: inductor's compile time grows with the blocks it unrolls
    # (three: 38 s on two cores with an empty cache, one: 23 s), and one has every kind of op
    one = dict(zip(MODELS[name].size_fields, SIZES[name]["small"]), layers=1)

    def trained(path, cfg):
        # without dropout: compiled code draws its random numbers differently
        return run(path, name, cfg, epochs=1, dropout=0.0, model=build(name, one))[1]

    eager = trained(tmp_path / "a", cfg)
    compiled = trained(tmp_path / "b", TrainConfig(lr=0.01, seed=4, compile=True))
    a = [r["loss"] for r in eager["train_curve"]]
    b = [r["loss"] for r in compiled["train_curve"]]
    assert a == pytest.approx(b, rel=1e-4, abs=1e-5)


def test_a_model_that_cannot_compile_runs_eager_with_a_warning(tmp_path):
    cfg = TrainConfig(lr=0.01, seed=4)
    _, eager = run(tmp_path / "a", "retran", cfg, epochs=1, dropout=0.0)
    with pytest.warns(UserWarning, match="compile: runs eager"):
        _, compiled = run(tmp_path / "b", "retran", TrainConfig(lr=0.01, seed=4, compile=True),
                          epochs=1, dropout=0.0)
    assert [r["loss"] for r in eager["train_curve"]] == [r["loss"] for r in compiled["train_curve"]]
