"""The project is licensed and citable, and CITATION.cff names the source of every experiment."""

from pathlib import Path

import yaml

from arithrepro.tasks.registry import TASKS

ROOT = Path(__file__).resolve().parents[1]


def test_citation_cites_the_project_and_every_experiments_source():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    assert cff["title"].startswith("arithrepro") and cff["authors"]
    sources = {}
    for ref in cff["references"]:
        assert ref["title"] and ref["authors"] and ref["type"], ref
        for name in TASKS:
            if f"The {name} experiment" in ref["notes"]:
                sources.setdefault(name, []).append(ref["title"])
    assert set(sources) == set(TASKS), "a reference per experiment, its notes naming it"
    assert all(len(titles) == 1 for titles in sources.values()), sources


def test_the_license_is_the_one_the_package_declares():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert 'license = {text = "MIT"}' in (ROOT / "pyproject.toml").read_text()
