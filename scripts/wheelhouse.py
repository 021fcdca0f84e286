"""A wheelhouse: every package requirements.lock pins, as wheels for another machine's Python, in
one folder, and the install from it on a machine that reaches no package index (an air-gapped
cluster node, a GPU machine with its own CUDA build of torch).

    python scripts/wheelhouse.py build --python 3.12 --dest wheelhouse     # here, with an index
    python scripts/wheelhouse.py install --wheelhouse wheelhouse --venv .venv   # on the node

`make wheelhouse` and `make setup-offline WHEELHOUSE=...` call these (docs/cluster.md).

torch, and the packages only torch needs, stay out: the node's own torch is the one that knows
its GPU. `install` makes the virtual environment see that torch through a .pth file naming the
folder it was imported from (system, conda or another venv alike); the venv's own packages come
first on sys.path, so the locked versions win over whatever else lies beside the node's torch.
A package PyPI ships as source only is built here into a wheel, which must then be pure Python.

With --present FILE (the node's `python -m pip list --format=freeze`, or bare names), a package
the node already has is left out: at any version where the file names none, else only at the
locked one. The venv then takes it from beside the node's torch. This keeps a wheelhouse small
where the node's image is rich (a GPU image holding numpy, scipy, pandas and pyarrow).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
# the manylinux tags pip must be told one by one (it matches each exactly): every glibc up to
# the node's, and the legacy aliases of 2_17, 2_12 and 2_5
LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
HEADER = "# wheelhouse for Python {python} on {platform}; made from requirements.lock by scripts/wheelhouse.py"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s#;]+)\s*(?:#\s*via\s+(.*))?$")
MISSING = re.compile(r"No matching distribution found for ([A-Za-z0-9._-]+)==")


class WheelhouseError(Exception):
    pass


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock_text: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, the packages that need it) for each pinned line of a uv lock."""
    out = {}
    for line in lock_text.splitlines():
        m = PIN.match(line.strip())
        if m:
            via = {canonical(v.split(" (")[0].strip()) for v in (m.group(3) or "").split(",") if v.strip()}
            out[canonical(m.group(1))] = (m.group(2), via)
    return out


def node_owned(locked: dict[str, tuple[str, set[str]]]) -> set[str]:
    """torch and what only torch (transitively) needs: the node brings these with its own torch."""
    owned = {"torch"}
    grew = True
    while grew:
        grew = False
        for name, (_, via) in locked.items():
            if name not in owned and via and via <= owned:
                owned.add(name)
                grew = True
    return owned


def platform_tags(arch: str, glibc: int) -> list[str]:
    tags = []
    for minor in range(glibc, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in LEGACY:
            tags.append(f"{LEGACY[minor]}_{arch}")
    return tags


def present_on_node(text: str) -> dict[str, str | None]:
    """name -> version (None: any) from a `pip list --format=freeze` listing or bare names."""
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonical(name.strip())] = version.strip() or None
    return out


def build_requires(pyproject: Path = ROOT / "pyproject.toml") -> set[str]:
    """The canonical names of this package's build back-end ([build-system] requires)."""
    text = pyproject.read_text()
    try:
        import tomllib
    except ImportError:   # Python 3.10: the table's one `requires = [...]` line
        m = re.search(r"^\[build-system\][^\[]*?^requires\s*=\s*\[([^\]]*)\]", text, re.M | re.S)
        requires = re.findall(r"[\"']([^\"']+)[\"']", m.group(1)) if m else []
    else:
        requires = tomllib.loads(text).get("build-system", {}).get("requires", [])
    return {canonical(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requires}


def wanted(lock_text: str, present: dict[str, str | None] | None = None) -> dict[str, str]:
    locked = pins(lock_text)
    if not locked:
        raise WheelhouseError(f"{LOCK.name}: no pinned package found")
    owned = node_owned(locked)
    present = present or {}
    # the editable install builds this package in an isolated environment that sees the
    # wheelhouse alone, never the node's packages: its back-end travels even where the node has it
    backend = build_requires()
    return {name: version for name, (version, _) in sorted(locked.items())
            if name not in owned and (name in backend
                                      or not (name in present and present[name] in (None, version)))}


def _wheel_names(dest: Path) -> dict[str, Path]:
    """canonical name==version -> wheel file, from the wheel file names (PEP 427)."""
    out = {}
    for path in dest.glob("*.whl"):
        name, version = path.name.split("-")[:2]
        out[f"{canonical(name)}=={version}"] = path
    return out


def build(python: str, arch: str, glibc: int, dest: Path, lock_text: str,
          present: dict[str, str | None] | None = None) -> list[str]:
    """Download (or build) one wheel per wanted pin into dest; returns the pins built from source."""
    pinned = wanted(lock_text, present)
    dest.mkdir(parents=True, exist_ok=True)
    platform = f"manylinux_2_{glibc}_{arch}"
    binary = dict(pinned)
    from_source = []
    target = ["--python-version", python, "--implementation", "cp"]
    for tag in platform_tags(arch, glibc):
        target += ["--platform", tag]
    while binary:
        reqs = dest / ".binary.txt"
        reqs.write_text("".join(f"{n}=={v}\n" for n, v in binary.items()))
        run = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             *target, "-d", str(dest), "-r", str(reqs)], capture_output=True, text=True)
        reqs.unlink()
        if run.returncode == 0:
            break
        missing = MISSING.search(run.stderr)
        if not missing or canonical(missing.group(1)) not in binary:
            raise WheelhouseError("pip download failed: " + (run.stderr.strip().splitlines() or ["?"])[-1])
        name = canonical(missing.group(1))
        from_source.append(f"{name}=={binary.pop(name)}")
    for pin in from_source:
        run = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-binary=:all:",
             "-w", str(dest), pin], capture_output=True, text=True)
        if run.returncode != 0:
            raise WheelhouseError(f"{pin}: no wheel for Python {python} on {platform}, and building "
                                  "it from source failed: " + run.stderr.strip().splitlines()[-1])
    have = _wheel_names(dest)
    for pin in from_source:
        built = have.get(pin)
        if built is None or not built.name.endswith("-none-any.whl"):
            raise WheelhouseError(f"{pin}: PyPI has only its source, and it does not build to a "
                                  f"pure-Python wheel here ({built.name if built else 'no wheel'})")
    lacking = [f"{n}=={v}" for n, v in pinned.items() if f"{n}=={v}" not in have]
    if lacking:
        raise WheelhouseError(f"{dest}: no wheel for {', '.join(lacking)}")
    (dest / "requirements.txt").write_text(
        HEADER.format(python=python, platform=platform) + "\n"
        + "".join(f"{n}=={v}\n" for n, v in pinned.items()))
    return from_source


def check_install(wheelhouse: Path, python_version: str) -> None:
    """Every refusal of `install`, before anything is written."""
    listing = wheelhouse / "requirements.txt"
    if not listing.is_file():
        raise WheelhouseError(f"{listing}: not found (make one with `make wheelhouse` where an "
                              "index is reachable, and copy the folder here)")
    m = re.match(r"# wheelhouse for Python (\S+) on (\S+)", listing.read_text())
    if not m:
        raise WheelhouseError(f"{listing}: not written by scripts/wheelhouse.py (no header line)")
    if m.group(1) != python_version:
        raise WheelhouseError(f"{listing}: its wheels are for Python {m.group(1)}, this Python is "
                              f"{python_version} (make wheelhouse WHEEL_PYTHON={python_version})")


def torch_site() -> Path:
    try:
        import torch
    except ImportError as err:
        raise WheelhouseError(f"{sys.executable}: cannot import torch ({err}); setup-offline uses "
                              "the node's own torch: name its Python with PYTHON=...") from None
    return Path(torch.__file__).resolve().parents[1]


def install(wheelhouse: Path, env: Path, extras: str) -> None:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    check_install(wheelhouse, version)
    site = torch_site()
    venv.EnvBuilder(with_pip=True).create(env)
    py = env / "bin" / "python"
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    offline = ["-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheelhouse), "--no-deps"]
    subprocess.run([py, *offline, "-r", str(wheelhouse / "requirements.txt")], check=True)
    subprocess.run([py, *offline, "-e", f"{ROOT}[{extras}]"], check=True)
    # only now: pip would take a package beside the node's torch as already installed
    (Path(purelib) / "_node_torch.pth").write_text(f"{site}\n")
    subprocess.run([py, "-c", "import torch, dvc, hydra, arithrepro.cli; "
                    "print(f'torch {torch.__version__} from {torch.__file__}, cuda {torch.cuda.is_available()}')"],
                   check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download or build the wheels (needs an index)")
    b.add_argument("--python", default=sysconfig.get_python_version(), help="the node's X.Y")
    b.add_argument("--arch", default="x86_64")
    b.add_argument("--glibc", type=int, default=28, help="the node's glibc minor version (2.N)")
    b.add_argument("--dest", type=Path, default=ROOT / "wheelhouse")
    b.add_argument("--present", type=Path, help="the packages the node has (pip list --format=freeze)")
    i = sub.add_parser("install", help="a venv from the wheelhouse over this Python's torch")
    i.add_argument("--wheelhouse", type=Path, required=True)
    i.add_argument("--venv", type=Path, default=ROOT / ".venv")
    i.add_argument("--extras", default="dev,llm")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            if args.present and not args.present.is_file():
                raise WheelhouseError(f"{args.present}: not found (--present)")
            present = present_on_node(args.present.read_text()) if args.present else None
            built = build(args.python, args.arch, args.glibc, args.dest, LOCK.read_text(), present)
            count = len(list(args.dest.glob("*.whl")))
            print(f"{args.dest}: {count} wheels for Python {args.python}"
                  + (f"; built from source: {', '.join(built)}" if built else ""))
        else:
            install(args.wheelhouse, args.venv, args.extras)
    except WheelhouseError as err:
        print(f"wheelhouse: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
