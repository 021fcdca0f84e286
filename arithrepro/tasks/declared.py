"""What a task declares beside its data and scoring (tasks/base.py): its part of dvc.yaml
(`Stages`), what its reports lead with (`Report`), and which models it takes (`Takes`).

A task module defines `TASK` and these three as `STAGES`, `REPORT` and `TAKES`; the task
registry (tasks/registry.py) reads them, and the pipeline, the reports and the registry's
checks read them there. Training a run reads none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple


@dataclass(frozen=True)
class Stages:
    """A task's part of dvc.yaml (arithrepro/pipeline.py)."""
    title: str                          # its section's title
    run_keys: tuple[str, ...] = ("models", "sizes", "seeds")   # the <task> keys naming its runs
    # dvc.yaml's plot definitions of its folders of plot data (one plot per file), and its
    # images written by stages other than its report
    plots: tuple[dict, ...] = ()
    images: tuple[str, ...] = ()
    train_blocks: tuple[str, ...] = ("data", "train")   # a grid task: the blocks its cells train on
    records: tuple[str, ...] = ()       # the folders of its records (none named: its runs')
    tables: tuple[str, ...] = ()        # its report's tables (none named: metrics/<task>.md)
    make: Callable[[], list] | None = None  # a task scored as it trains: its stages before its
                                            # report (a grid task's are made for it)


class Count(NamedTuple):
    """A family of accuracies named <prefix><n> (acc_len8, acc_len12, ...): a table of its own
    in the task's report, one row per n, rather than a column each in its main table."""
    prefix: str
    label: str      # what n counts: the table's first column
    title: str
    note: str = ""


@dataclass(frozen=True)
class Report:
    """What a task's report shows. `headline`: what a reader compares first, in
    metrics/headline.json (mean and std over seeds per model and size) and a grid stage's
    summary line, over the sizes `headline_sizes` matches (a regular expression; empty: every
    size). `counts`: its counted families, each a table after the main one (a task whose
    tables are its own names their writer in report/figures.py)."""
    headline: tuple[str, ...] = ()
    headline_sizes: str = ""
    counts: tuple[Count, ...] = ()


@dataclass(frozen=True)
class Takes:
    """Which models a task takes (checked when the task registry is built)."""
    own: tuple[str, ...] = ()    # registry models sized by the run that its runs build (none:
                                 # the grid models of its first form)
    decodes: bool = False        # it generates token by token: its models must declare `decodes`
    priced: bool = False         # it prices every model by its cost formula
