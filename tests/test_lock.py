"""requirements.lock: what `make setup` installs besides torch, every version pinned."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return pins


def _declared() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values()
                                        for r in extra)]
    out = {}
    for req in reqs:
        name, version = req.split("==")
        out[re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()] = version
    return out


def test_the_lock_pins_every_declared_dependency_at_its_declared_version():
    lock, declared = _lock(), _declared()
    for name, version in declared.items():
        if name == "torch":
            continue
        assert lock.get(name) == version, f"{name}: pyproject {version}, lock {lock.get(name)} (make lock)"


def test_the_lock_holds_neither_torch_nor_cuda_packages():
    """torch is installed first from its CPU build; a lock resolved against PyPI's torch would
    bring its CUDA packages (several GB)."""
    lock = _lock()
    assert "torch" not in lock
    assert not [n for n in lock if n.startswith(("nvidia-cu", "nvidia-nccl", "triton"))]


def test_setup_installs_from_the_lock_without_resolving():
    make = (ROOT / "Makefile").read_text()
    assert "--no-deps -r requirements.lock" in make
    assert re.search(r"--no-deps -e '\.\[dev,llm\]'", make)


# an import's name where its distribution's differs
DISTRIBUTION = {"PIL": "pillow", "yaml": "pyyaml", "torch_optimizer": "torch-optimizer"}


def test_every_package_the_code_imports_is_declared():
    """A package imported only because another one happens to bring it would vanish with that
    one's next release."""
    import ast
    import sys

    imported = set()
    for path in [*(ROOT / "arithrepro").rglob("*.py"), *(ROOT / "stages").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"arithrepro"}
    declared = set(_declared())
    missing = {m for m in third_party
               if re.sub(r"[-_.]+", "-", DISTRIBUTION.get(m, m)).lower() not in declared}
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"
