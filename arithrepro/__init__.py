"""arithrepro: re-run and compare published experiments on small sequence models learning arithmetic."""

__version__ = "0.1.0"
