"""`cpu` in params: the vector unit and thread count torch's kernels run with (arithrepro/cpu.py)."""

import os
import subprocess
import sys

import pytest

from arithrepro import cpu
from arithrepro.schema import ParamsError, check_schema


@pytest.mark.parametrize("value,message", [
    ({"capability": "sse4", "threads": "auto"}, "cpu.capability = 'sse4': expected one of"),
    ({"capability": "native", "threads": "many"}, "cpu.threads = 'many': expected auto or a number"),
    ({"capability": "native", "threads": 0}, "cpu.threads = 0: expected"),
])
def test_bad_settings_are_one_line(value, message):
    with pytest.raises(ParamsError, match=message.replace("(", r"\(")):
        check_schema({"cpu": cpu.schema()}, {"cpu": value}, "")


def test_a_process_started_for_a_capability_runs_it():
    """Set before torch's first kernel call, the capability holds (DEFAULT exists on every
    CPU); the thread count too."""
    code = ("from arithrepro import cpu; cpu.apply({'capability': 'default', 'threads': 1}); "
            "import torch; torch.ones(3).exp(); print(cpu.capability(), torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["DEFAULT", "1"]


def test_native_with_the_variable_set_is_refused(monkeypatch):
    monkeypatch.setenv(cpu.ENV, "avx2")
    with pytest.raises(ParamsError, match="cpu.capability = native, but ATEN_CPU_CAPABILITY=avx2 "
                                          "is set: set cpu.capability to avx2 instead"):
        cpu.apply({"capability": "native", "threads": "auto"})


@pytest.mark.skipif(cpu.capability() == "DEFAULT", reason="this CPU runs DEFAULT natively")
def test_a_process_already_running_other_kernels_says_so():
    import torch

    torch.ones(3).exp()   # this process's kernels are chosen
    assert cpu.ENV not in os.environ
    try:   # apply sets the variable itself: take it away again, for the tests after this one
        with pytest.raises(ParamsError, match=f"cpu.capability = default: torch runs {cpu.capability()} kernels"):
            cpu.apply({"capability": "default", "threads": "auto"})
    finally:
        os.environ.pop(cpu.ENV, None)


def test_the_environment_a_runner_passes_on():
    assert cpu.env_for({"capability": "native", "threads": "auto"}) == {}
    assert cpu.env_for({"capability": "avx2", "threads": 2}) == {
        "ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
