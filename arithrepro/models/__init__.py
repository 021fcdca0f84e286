"""The models: one module per family, and `registry.py`, the table that names each model, its
builder and its capabilities. Builders import torch; the package itself imports nothing."""
