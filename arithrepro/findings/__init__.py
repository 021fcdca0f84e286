"""Findings: the sources' claims that the runs test, as checks on the run records (base.py),
one module of checks per task and a registry (registry.py). Training never imports them, so a
change to a check or to the statistics re-runs the reports, not the runs."""
