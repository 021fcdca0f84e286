"""One module per DVC stage: its click command, the params keys it reads and the files it writes.

This folder is installed as the `arithrepro.stages` package. The library (arithrepro/) knows
nothing of file layout; the layout lives here, in `paths`.
"""
