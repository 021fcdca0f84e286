"""Experiments side by side, narrow enough to read: one column per experiment, one row per
params key whose value differs between them and per headline metric (metrics/headline.json:
mean ± std over seeds per model and size). `dvc exp show` puts every params key in a column
(hundreds of them); this is its transpose, with only what differs.

The input is `dvc exp show --json`'s output; `rows` and `render` are plain functions of it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

PARAMS = "params.yaml"
HEADLINE = "metrics/headline.json"


@dataclass(frozen=True)
class Exp:
    name: str
    params: dict    # flattened: "expr.train.epochs" -> value
    metrics: dict   # flattened: "expr.gpt-medium.test_acc" -> value


def flatten(tree, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _data(entry: dict, file: str, kind: str) -> dict:
    files = (entry.get("data") or {}).get(kind) or {}
    return (files.get(file) or {}).get("data") or {}


def _is_hash(rev: str) -> bool:
    return len(rev) == 40 and all(c in "0123456789abcdef" for c in rev)


def experiments(shown: list) -> list[Exp]:
    """The workspace, each baseline commit and its experiments, in `dvc exp show`'s order."""
    out = []

    def add(entry: dict, default: str) -> None:
        data = entry.get("data") or {}
        rev = data.get("rev") or default
        # a commit's hash reads in git's short form; "workspace" stays whole
        name = entry.get("name") or data.get("name") or (rev[:7] if _is_hash(rev) else rev)
        out.append(Exp(name, flatten(_data(entry, PARAMS, "params")),
                       flatten(_data(entry, HEADLINE, "metrics"))))

    for baseline in shown:
        add(baseline, baseline.get("rev", "workspace"))
        for group in baseline.get("experiments") or []:
            for rev in group.get("revs") or []:
                add(rev, rev.get("rev", "?"))
    return out


def _in_task(key: str, task: str | None) -> bool:
    if task is None:
        return True
    head = key.split(".")[0]
    return head == task or (head == "models" and task in ("expr", "abacus", "looped"))


def rows(exps: list[Exp], task: str | None = None) -> list[tuple[str, list]]:
    """(label, one value per experiment): the params keys that differ between the experiments,
    then the headline metrics (a metric's `_std` beside its mean), of one task or all.
    `n_params(table)` says where the metrics start."""
    keys = sorted({k for e in exps for k in e.params if _in_task(k, task)})
    out = []
    for key in keys:
        values = [e.params.get(key) for e in exps]
        if any(json.dumps(v, sort_keys=True) != json.dumps(values[0], sort_keys=True)
               for v in values):
            out.append((key, values))
    metrics = sorted({k for e in exps for k in e.metrics
                      if not k.endswith("_std") and _in_task(k, task)})
    for key in metrics:
        out.append((key, [_mean_std(e.metrics, key) for e in exps]))
    return out


def n_params(table: list[tuple[str, list]], exps: list[Exp]) -> int:
    """How many of the rows are params keys (the rest are metrics)."""
    keys = {k for e in exps for k in e.params}
    return sum(1 for key, _ in table if key in keys)


def _mean_std(metrics: dict, key: str):
    mean, std = metrics.get(key), metrics.get(f"{key}_std")
    return mean if std is None else (mean, std)


def _cell(value, width: int) -> str:
    if isinstance(value, tuple):
        text = f"{_number(value[0])}±{_number(value[1])}"
    elif value is None:
        text = "-"
    elif isinstance(value, float):
        text = _number(value)
    else:
        text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= width else text[:width - 1] + "…"


def _number(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def render(exps: list[Exp], table: list[tuple[str, list]], width: int = 200,
           metrics_from: int | None = None) -> str:
    """A fixed-width table, at most `width` characters a line: each experiment's column as wide
    as its longest value (at most 20), the label column what is left; a rule before the
    metrics (rows from `metrics_from` on)."""
    if not exps:
        return "no experiments"
    texts = [[_cell(v, 20) for v in values] for _, values in table]
    cols = [max([len(_cell(e.name, 20))] + [len(row[i]) for row in texts]) for i, e in enumerate(exps)]
    room = width - sum(c + 2 for c in cols)
    label = max(12, min(room, max([len(k) for k, _ in table] + [5])))
    head = "".ljust(label) + "".join("  " + _cell(e.name, c).rjust(c) for e, c in zip(exps, cols))
    lines = [head, "-" * len(head)]
    for n, ((key, _), row) in enumerate(zip(table, texts)):
        if n and n == metrics_from:
            lines.append("-" * len(head))
        lines.append(_cell(key, label).ljust(label)
                     + "".join("  " + t.rjust(c) for t, c in zip(row, cols)))
    if not table:
        lines.append("(no params differ; no headline metrics)")
    return "\n".join(line.rstrip() for line in lines)
