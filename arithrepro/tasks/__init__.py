"""The tasks: one module per experiment's data and scoring, the interface they share
(`base.py`) and `registry.py`, the table of tasks. The package itself imports nothing."""
