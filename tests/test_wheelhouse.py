"""scripts/wheelhouse.py: which locked packages a node's wheelhouse holds, the tags pip is asked
for, the retry that builds source-only packages, and the install's refusals before any work.
The downloads themselves need an index and are tried by hand (docs/cluster.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import wheelhouse as wh

LOCK = (Path(__file__).resolve().parents[1] / "requirements.lock").read_text()


def test_pins_read_versions_and_who_needs_them():
    got = wh.pins("# header\nruamel.yaml.clib==0.2.15  # via dvc, arithrepro (pyproject.toml)\n"
                  "Foo_Bar==1.0\n    # comment\n")
    assert got == {"ruamel-yaml-clib": ("0.2.15", {"dvc", "arithrepro"}), "foo-bar": ("1.0", set())}


def test_torch_and_what_only_torch_needs_are_left_to_the_node():
    owned = wh.node_owned(wh.pins(LOCK))
    assert {"torch", "sympy", "mpmath", "jinja2"} <= owned
    # needed by torch and by others: the wheelhouse carries them
    assert not owned & {"networkx", "setuptools", "filelock", "numpy", "typing-extensions"}
    wanted = wh.wanted(LOCK)
    assert "torch" not in wanted and "sympy" not in wanted
    assert wanted["dvc"] == wh.pins(LOCK)["dvc"][0]


def test_a_package_the_node_has_stays_out_unless_at_another_version():
    numpy = wh.pins(LOCK)["numpy"][0]
    present = wh.present_on_node(f"numpy=={numpy}\nSciPy\npandas==0.0.1\n# a comment\n")
    wanted = wh.wanted(LOCK, present)
    assert "numpy" not in wanted and "scipy" not in wanted
    assert "pandas" in wanted


@pytest.mark.parametrize("tomllib", [True, False], ids=["tomllib", "python3.10"])
def test_the_build_back_end_travels_even_where_the_node_has_it(tomllib, monkeypatch):
    # the editable install builds in isolation, seeing the wheelhouse and not the node
    if not tomllib:
        monkeypatch.setitem(sys.modules, "tomllib", None)   # its import then fails
    assert wh.build_requires() == {"setuptools"}
    present = wh.present_on_node("setuptools\nnumpy\n")
    wanted = wh.wanted(LOCK, present)
    assert wanted["setuptools"] == wh.pins(LOCK)["setuptools"][0] and "numpy" not in wanted


def test_platform_tags_cover_every_glibc_up_to_the_node_and_the_legacy_names():
    tags = wh.platform_tags("x86_64", 28)
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_29_x86_64" not in tags
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
            "manylinux_2_5_x86_64"} <= set(tags)


def test_a_source_only_package_is_built_and_the_listing_written(tmp_path, monkeypatch):
    lock = "alpha==1.0  # via arithrepro (pyproject.toml)\nbeta-pkg==2.0  # via alpha\ntorch==9\n"
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d" if "download" in cmd else "-w") + 1])
        if "download" in cmd:
            reqs = Path(cmd[-1]).read_text()
            if "beta-pkg" in reqs:
                return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for beta-pkg==2.0\n")
            (dest / "alpha-1.0-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"")
        else:
            (dest / "beta_pkg-2.0-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(wh.subprocess, "run", fake_run)
    built = wh.build("3.12", "x86_64", 28, tmp_path, lock)
    assert built == ["beta-pkg==2.0"]
    assert [c[3] for c in calls] == ["download", "download", "wheel"]
    listing = (tmp_path / "requirements.txt").read_text().splitlines()
    assert listing[0].startswith("# wheelhouse for Python 3.12 on manylinux_2_28_x86_64")
    assert listing[1:] == ["alpha==1.0", "beta-pkg==2.0"]


def test_a_source_only_package_with_compiled_code_is_refused(tmp_path, monkeypatch):
    def fake_run(cmd, **kwargs):
        if "download" in cmd:
            return subprocess.CompletedProcess(cmd, 1, "", "No matching distribution found for alpha==1.0")
        (tmp_path / "alpha-1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(wh.subprocess, "run", fake_run)
    with pytest.raises(wh.WheelhouseError, match=r"alpha==1.0: PyPI has only its source.*pure-Python"):
        wh.build("3.12", "x86_64", 28, tmp_path, "alpha==1.0  # via arithrepro (pyproject.toml)\n")
    assert not (tmp_path / "requirements.txt").exists()


def _listing(folder: Path, python: str) -> Path:
    folder.mkdir()
    (folder / "requirements.txt").write_text(wh.HEADER.format(python=python, platform="p") + "\nalpha==1\n")
    return folder


@pytest.mark.parametrize("case, message", [
    ("missing", r"requirements.txt: not found"),
    ("no header", r"requirements.txt: not written by scripts/wheelhouse.py"),
    ("other python", r"its wheels are for Python 2.7, this Python is"),
    ("no torch", r"cannot import torch"),
])
def test_install_refuses_in_one_line_before_writing_anything(tmp_path, monkeypatch, capsys, case, message):
    house = tmp_path / "house"
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if case == "no header":
        house.mkdir()
        (house / "requirements.txt").write_text("alpha==1\n")
    elif case != "missing":
        _listing(house, "2.7" if case == "other python" else here)
    if case == "no torch":
        monkeypatch.setitem(sys.modules, "torch", None)
    env = tmp_path / "venv"
    assert wh.main(["install", "--wheelhouse", str(house), "--venv", str(env)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("wheelhouse: ")
    assert re.search(message, err)
    assert not env.exists()
