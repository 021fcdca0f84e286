"""Which params keys a stage reads, recorded while it runs, so that a test can hold each stage's
`params:` list in dvc.yaml to what its command really reads.

With ARITHREPRO_PARAMS_LOG=<file> set, `config.load` returns the params wrapped in `Reads`, and
the process appends one JSON line to <file> when it exits: its arguments and the dotted keys it
read. A key counts as read when its value is taken (a leaf), or when a mapping is used whole:
iterated, unpacked, copied with dict(), or serialized (a hash of a block reads all of it). Asking
whether a key is there reads that key (a default may be taken instead).
Taking a mapping only to look inside it does not count: the keys read below it do. Checks that
only stop a run (is this model one of <task>.models?) read through `peek`, which is not recorded.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import sys

ENV = "ARITHREPRO_PARAMS_LOG"


class Reads(dict):
    """A params mapping that notes, in a shared set, the dotted key of what is read from it."""

    def __init__(self, data: dict, path: str = "", log: set | None = None):
        # dict.items: building one from another must not count as reading it
        super().__init__(dict.items(data))
        self._path = path
        self._log = set() if log is None else log

    def _key(self, key) -> str:
        return f"{self._path}.{key}" if self._path else str(key)

    def _whole(self) -> None:
        self._log.add(self._path)

    def __getitem__(self, key):
        value = super().__getitem__(key)
        if isinstance(value, Reads):   # a merged block keeps the path it was read under
            return value
        if isinstance(value, dict):
            return Reads(value, self._key(key), self._log)
        self._log.add(self._key(key))
        return value

    def __contains__(self, key) -> bool:
        # whether a key is there is a read of that key (a default may be taken instead)
        self._log.add(self._key(key))
        return super().__contains__(key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self):
        self._whole()
        return super().__iter__()

    def keys(self):
        self._whole()
        return super().keys()

    def items(self):
        self._whole()
        return super().items()

    def values(self):
        self._whole()
        return super().values()

    def __deepcopy__(self, memo):
        # a copy is read only where its keys are read
        return Reads(copy.deepcopy(dict(self.__raw_items()), memo), self._path, self._log)

    def __raw_items(self):
        return dict.items(self)

    def __reduce__(self):
        self._whole()
        return dict, (dict(self.__raw_items()),)


def peek(params: dict, *keys):
    """params[k1][k2]... without recording the read (for checks that cannot change a result)."""
    value = params
    for key in keys:
        value = dict.__getitem__(value, key)
    return value


def unrecorded(params):
    """A plain copy of params, read without recording (to list what the params hold)."""
    if isinstance(params, dict):
        return {k: unrecorded(v) for k, v in dict.items(params)}
    if isinstance(params, list):
        return [unrecorded(v) for v in params]
    return params


_PENDING: list[set] = []   # the reads of the command running in this process, not yet written


def recording(params: dict) -> dict:
    """params wrapped to record reads when ARITHREPRO_PARAMS_LOG is set; else params itself.
    The reads are written when the process exits, or when a stage worker (stage_worker.py),
    which runs many commands in one process, ends one (`flush`)."""
    if not os.environ.get(ENV):
        return params
    log: set = set()
    _PENDING.append(log)
    return Reads(params, "", log)


def flush(argv: list[str]) -> None:
    """Write one line for the command `argv` (its arguments after the program's name): the keys
    read since the last flush. Nothing when it loaded no params."""
    target = os.environ.get(ENV)
    if not target or not _PENDING:
        return
    read = set().union(*_PENDING)
    _PENDING.clear()
    # one write to a file opened for appending: stages running side by side (arithrepro
    # repro) add whole lines, never interleaved ones
    line = (json.dumps({"argv": list(argv), "read": sorted(read)}) + "\n").encode()
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


atexit.register(lambda: flush(sys.argv[1:]))   # writes nothing when no params were loaded
