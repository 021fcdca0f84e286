"""Where `make test`'s time goes, by test file: a pytest plugin that sums each test's setup, call
and teardown (the durations `--durations` reports, for every test) per file and prints the
files, slowest first, at the end of the run. Under pytest-xdist it runs in the controller, which
receives every worker's reports, so the sums are worker time, not wall time.

    PATH=$PWD/.venv/bin:$PATH OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -n 2 --dist loadfile \\
        --no-loadscope-reorder -p benchmarks.suite_times
"""

from __future__ import annotations

from collections import defaultdict

_by_file: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report) -> None:
    _by_file[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    total = sum(_by_file.values())
    terminalreporter.write_sep("=", f"worker time by test file ({total:.0f} s in all)")
    for path, seconds in sorted(_by_file.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
