"""The params schema's building blocks: checks for one value, and the walk that applies a
schema to a mapping, naming the key of the first bad value in one line.

A schema is a dict (fixed keys -> schema), a Map (free keys -> schema) or a leaf check; a leaf
check takes (key, value) and raises ParamsError. This module imports nothing of the project:
everything else builds its params blocks from it.
"""

from __future__ import annotations

from typing import Any, Callable


class ParamsError(Exception):
    """A params.yaml (or command-line) value that is not allowed; the message is one line."""


Check = Callable[[str, Any], None]


def fail(key: str, value: Any, allowed: str) -> None:
    raise ParamsError(f"{key} = {value!r}: expected {allowed}")


def integer(lo: int | None = None, hi: int | None = None) -> Check:
    def check(key, value):
        rng = _range_text(lo, hi)
        if isinstance(value, bool) or not isinstance(value, int):
            fail(key, value, f"an integer{rng}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            fail(key, value, f"an integer{rng}")

    return check


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           hi_open: bool = False) -> Check:
    def check(key, value):
        rng = _range_text(lo, hi, lo_open, hi_open)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(key, value, f"a number{rng}")
        bad_lo = lo is not None and (value <= lo if lo_open else value < lo)
        bad_hi = hi is not None and (value >= hi if hi_open else value > hi)
        if bad_lo or bad_hi or value != value:
            fail(key, value, f"a number{rng}")

    return check


def boolean(key, value) -> None:
    if not isinstance(value, bool):
        fail(key, value, "true or false")


def choice(*allowed: str) -> Check:
    def check(key, value):
        if value not in allowed:
            fail(key, value, "one of " + ", ".join(allowed))

    return check


def list_of(item: Check, min_len: int = 1, unique: bool = True) -> Check:
    def check(key, value):
        if not isinstance(value, list) or len(value) < min_len:
            fail(key, value, f"a list of at least {min_len} item(s)")
        for i, v in enumerate(value):
            item(f"{key}[{i}]", v)
        if unique and len({repr(v) for v in value}) != len(value):
            fail(key, value, "a list without repeats")

    return check


class Optional:
    """A key of a fixed mapping that may be left out."""

    def __init__(self, schema: Any):
        self.schema = schema


class Map:
    """A mapping with free keys (e.g. model sizes); `keys` restricts them when given."""

    def __init__(self, value_schema: Any, keys: tuple[str, ...] | None = None, min_len: int = 1):
        self.value_schema, self.keys, self.min_len = value_schema, keys, min_len


def _range_text(lo, hi, lo_open=False, hi_open=False) -> str:
    if lo is not None and hi is not None:
        return f" in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f" {'<' if hi_open else '<='} {hi}"
    return ""


def check_schema(schema: Any, value: Any, key: str) -> None:
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            fail(key, value, "a mapping with keys " + ", ".join(schema))
        for k in value:
            if k not in schema:
                raise ParamsError(f"{_join(key, k)}: unknown key{did_you_mean(k, schema, key)}; "
                                  f"allowed: {', '.join(schema)}")
        for k, sub in schema.items():
            if isinstance(sub, Optional):
                if k in value:
                    check_schema(sub.schema, value[k], _join(key, k))
                continue
            if k not in value:
                raise ParamsError(f"{_join(key, k)}: missing")
            check_schema(sub, value[k], _join(key, k))
    elif isinstance(schema, Map):
        if not isinstance(value, dict) or len(value) < schema.min_len:
            fail(key, value, f"a mapping with at least {schema.min_len} entry")
        for k, v in value.items():
            if schema.keys is not None and k not in schema.keys:
                hint = did_you_mean(k, schema.keys, key)
                raise ParamsError(f"{_join(key, k)}: unknown key{hint}; "
                                  f"allowed: {', '.join(schema.keys)}")
            check_schema(schema.value_schema, v, _join(key, k))
    else:
        schema(key, value)


def did_you_mean(name: Any, allowed, prefix: str = "") -> str:
    """' (did you mean <prefix>.X?)' for the allowed name X most like `name`, or nothing."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f" (did you mean {_join(prefix, close[0])}?)" if close else ""


def _join(prefix: str, key: Any) -> str:
    # a key a line cannot show (a newline, a control character) is quoted, so the message
    # stays one line
    shown = str(key) if str(key).isprintable() else repr(key)
    return f"{prefix}.{shown}" if prefix else shown
