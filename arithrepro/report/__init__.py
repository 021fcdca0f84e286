"""Tables and figures built from the run records of every task."""
