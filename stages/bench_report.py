"""render-figures-bench: the benchmark's grid, every grid task x every grid model."""

from __future__ import annotations

import click

from arithrepro.stages.common import done, friendly_errors, params_option


@click.command("render-figures-bench")
@params_option
@friendly_errors
def report_bench(params_path: str) -> None:
    """Write the benchmark's grid: task x model, accuracy within and beyond the training
    lengths, mean ± std and n, each cell linked to its configuration (docs/bench.md).

    Reads params: bench, and the lists that name each grid task's own runs; the records of
    the benchmark's cells (metrics/<task>/bench/) and of the tasks' own cells at the bench's
    sizes (metrics/<task>/runs/). Writes metrics/bench.md and plots/bench/grid.png.
    """
    from arithrepro import config
    from arithrepro.report.bench import write

    written = write(config.load(params_path))
    done("render-figures-bench -> " + ", ".join(str(p) for p in written))
