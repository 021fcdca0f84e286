"""smoke: the whole pipeline at the smoke profile's toy sizes, in a copy of this checkout, so
that a first try changes nothing here (params.yaml, dvc.lock, metrics/headline.json, docs/ and
README.md stay as they are) and `make repro` afterwards runs the default profile."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import click

from arithrepro.stages.common import done, friendly_errors

WHERE = Path(".dvc") / "tmp" / "smoke"


@click.command("smoke")
@click.argument("targets", nargs=-1)
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Stages at once (as `arithrepro repro`).")
@friendly_errors
def smoke(targets: tuple[str, ...], jobs: int | None) -> None:
    """Run the smoke profile (TARGETS and what they depend on; none: every stage) in a copy of
    this checkout's files as they are, uncommitted changes included, at .dvc/tmp/smoke: its own
    params.yaml, dvc.lock and pages (pages/results.md), this checkout's DVC cache, so a second
    try trains nothing it trained before. Its pages are never published to docs/."""
    from dvc.repo import Repo

    from arithrepro.checkout import copy_checkout

    root = Path(Repo.find_root())
    where = root / WHERE
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    copy_checkout(root, where, "the checkout a smoke run copied")
    bin_dir = Path(sys.executable).parent   # this environment's dvc and arithrepro
    steps = [[str(bin_dir / "dvc"), "cache", "dir", "--local", str(root / ".dvc" / "cache")],
             [str(bin_dir / "arithrepro"), "compose-params", "-S", "profile=smoke"],
             [str(bin_dir / "arithrepro"), "repro", *(["--jobs", str(jobs)] if jobs else []),
              *targets]]
    for argv in steps:
        if subprocess.run(argv, cwd=where).returncode:
            raise click.ClickException(f"smoke: `{Path(argv[0]).name} {' '.join(argv[1:3])} ...` "
                                       f"failed in {WHERE}")
    done(f"smoke: the smoke profile's pipeline ran in {WHERE}; its page: {WHERE}/pages/results.md "
         "(this checkout unchanged: `make repro` runs its own profile)")
