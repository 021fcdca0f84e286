"""One module per DVC stage: its click command, the params keys it reads and the files it writes.

This folder is installed as the `arithrepro.stages` package. The file layout of the pipeline
(data/, runs/, metrics/, plots/) and of every run is said once, in arithrepro/runs.py.
"""
