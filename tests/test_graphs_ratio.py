"""benchmarks/graphs_ratio.py: eager against `graphs: auto` per run shape, from two estimate
files; a shape where auto is slower than eager beyond the tolerance fails the check."""

import json

import pytest

from benchmarks import graphs_ratio


def _estimate(path, steps: dict) -> str:
    path.write_text(json.dumps({"profiles": {"paper": [
        {"task": t, "label": l, "timing": {"step_s": s, "validation_s": 0.1}}
        for (t, l), s in steps.items()]}}))
    return str(path)


def test_each_shape_side_by_side_and_a_slower_auto_fails(tmp_path, capsys):
    eager = _estimate(tmp_path / "e.json", {("expr", "gpt-small"): 0.0114, ("looped", "looped-notebook"): 0.040})
    auto = _estimate(tmp_path / "a.json", {("expr", "gpt-small"): 0.0011, ("looped", "looped-notebook"): 0.120})
    assert graphs_ratio.main([eager, auto]) == 1
    out = capsys.readouterr().out
    assert "| expr | gpt-small | 11.40 | 1.10 | 10.36x |" in out
    assert "| looped | looped-notebook | 40.00 | 120.00 | 0.33x |" in out
    assert "auto slower than eager by more than 5%: looped looped-notebook (0.33x)" in out
    fine = _estimate(tmp_path / "f.json", {("expr", "gpt-small"): 0.0011, ("looped", "looped-notebook"): 0.041})
    assert graphs_ratio.main([eager, fine]) == 0   # 0.98x: within the tolerance


def test_files_of_other_shapes_or_not_estimates_are_refused(tmp_path):
    eager = _estimate(tmp_path / "e.json", {("expr", "gpt-small"): 0.01})
    other = _estimate(tmp_path / "o.json", {("expr", "gpt-large"): 0.01})
    with pytest.raises(SystemExit, match="cover other shapes"):
        graphs_ratio.main([eager, other])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match=r"bad.json: not an `arithrepro estimate --json` file"):
        graphs_ratio.main([eager, str(tmp_path / "bad.json")])
