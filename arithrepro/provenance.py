"""Where a run came from: the code's commit, the library versions, the machine and the params it
read, as one JSON block for its record.

The same commit and seed give different numbers on two machines: CPUs with other vector units
(AVX2, AVX-512, NEON) sum in another order and round differently, a GPU differs again, and the
thread count changes how reductions are split. Training amplifies these last-bit differences,
so a record must say where it came from to be compared with another.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

# The distributions a run's numbers can depend on (pyproject.toml's dependencies that compute).
LIBRARIES = ("torch", "numpy", "torch-optimizer", "torchtune", "torchao", "datasets", "pandas", "dvc")
# Files the pipeline itself rewrites while it runs, and params.yaml (`dvc exp run -S` and
# compose-params rewrite it; what a run read of it is hashed beside, params_sha256): a change
# there says nothing about the code.
NOT_CODE = (":(exclude)dvc.lock", ":(exclude,glob)**/.gitignore", ":(exclude)params.yaml")


def provenance(params: dict, *, device: str, precision: str, compiled: bool | str = False,
               graphs: bool = False, root: str | Path | None = None) -> dict:
    """The block for a run record. `params`: what the run read from params.yaml (hashed, not
    copied); `device`: where it ran ("cpu", "cuda", "cuda:1"); `compiled`: params' compile
    (False, True or a torch.compile mode); `graphs`: whether each step was a CUDA graph; `root`: the code's checkout (by default the one this
    package is imported from)."""
    import torch

    return {**git_state(Path(root) if root is not None else code_root()),
            "python": platform.python_version(), "versions": library_versions(),
            "platform": platform.platform(), "cpu": cpu_model(), "cpu_capability": cpu_capability(),
            **accelerator(device), "threads": torch.get_num_threads(),
            "processes": int(os.environ.get("WORLD_SIZE", "1")),
            "precision": precision, "compile": compiled, "graphs": graphs,
            "params_sha256": params_hash(params)}


def params_hash(params) -> str:
    """sha256 of the params as canonical JSON: key order does not count, every value does."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


def code_root() -> Path:
    """The directory holding the arithrepro package: a checkout's root in an editable install."""
    return Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def git_state(root: Path) -> dict:
    """{"commit": full sha, "dirty": tracked files differ from it}; nulls outside a checkout."""
    found = _git(root, "rev-parse", "--show-toplevel", "HEAD")
    lines = found.splitlines() if found else []
    # An installed package sits in site-packages, which may lie inside some other repository
    # (a .venv in a checkout): that repository's commit is not this code's.
    if len(lines) != 2 or Path(lines[0]).resolve() != Path(root).resolve():
        return {"commit": None, "dirty": None}
    # Untracked files are left out: a running pipeline's outputs are untracked until DVC
    # lists them in a .gitignore.
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", *NOT_CODE)
    return {"commit": lines[1], "dirty": None if status is None else bool(status.strip())}


def _git(root: Path, *args: str) -> str | None:
    """git's stdout, or None when git, the directory or the repository is missing."""
    try:
        # no optional locks: status may run beside another git command in the same checkout
        proc = subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def library_versions() -> dict:
    return {name: _version(name) for name in LIBRARIES}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def cpu_model() -> str | None:
    """/proc/cpuinfo's model name (Linux); elsewhere whatever platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


@functools.lru_cache(maxsize=None)
def cpu_capability() -> str | None:
    """The vector instruction set torch's CPU kernels dispatch to (DEFAULT, AVX2, AVX512, ...)."""
    from arithrepro.cpu import capability

    return capability()


def accelerator(device: str) -> dict:
    """{"device", "gpu", "cuda"}: the GPU's name and CUDA version when the run used one."""
    if not str(device).startswith("cuda"):
        return {"device": str(device), "gpu": None, "cuda": None}
    return {"device": str(device), **_gpu(str(device))}


@functools.lru_cache(maxsize=None)
def _gpu(device: str) -> dict:
    import torch

    return {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda}
