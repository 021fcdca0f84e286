"""Bad input, generated (hypothesis): random mutations of a valid params file, random overrides
and profile names on the command line, and random damage to every kind of file the stages read.
Each is refused with one line naming the key or the file, never with a traceback; a damage that
leaves a file readable (a flipped digit in a weight) may pass, as it would anywhere."""

import copy
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arithrepro import config
from arithrepro.cli import main
from arithrepro.schema import ParamsError

ROOT = Path(__file__).resolve().parents[1]
SMOKE = config.compose(["profile=smoke"], ROOT / "conf")


def paths(tree, prefix=()):
    """Every key path of a nested mapping (lists are leaves)."""
    for key, value in tree.items():
        yield (*prefix, key)
        if isinstance(value, dict):
            yield from paths(value, (*prefix, key))


PATHS = sorted(paths(SMOKE), key=lambda p: tuple(map(str, p)))

WRONG = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                  st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                  st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(
                      st.text(max_size=4), st.integers(), max_size=2))
OUT_OF_RANGE = st.sampled_from([-1, 0, -10**9, 10**12, -0.5, 1e30, math.nan, math.inf, -math.inf])


def at(tree, path):
    for key in path[:-1]:
        tree = tree[key]
    return tree


@st.composite
def mutations(draw):
    """(what was done, the path it was done at, the mutated params)."""
    params = copy.deepcopy(SMOKE)
    path = draw(st.sampled_from(PATHS))
    parent, key = at(params, path), path[-1]
    kind = draw(st.sampled_from(["type", "range", "unknown", "missing"]))
    if kind == "type":
        parent[key] = draw(WRONG)
    elif kind == "range":
        parent[key] = draw(OUT_OF_RANGE)
    elif kind == "unknown":
        target = parent[key] if isinstance(parent[key], dict) else parent
        name = draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10))
        if name in target:
            name += "_x"
        target[name] = draw(WRONG)
        path = (*path, name) if target is not parent else (*path[:-1], name)
    else:
        del parent[key]
    return kind, path, params


COUNTS = {"params": 0, "refused": 0}
PARAMS_EXAMPLES, CLI_EXAMPLES = 400, 100


@settings(max_examples=PARAMS_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_a_mutated_params_file_is_accepted_or_refused_in_one_line_naming_the_key(mutation):
    kind, path, params = mutation
    COUNTS["params"] += 1
    try:
        config.validate(params)
    except ParamsError as err:
        COUNTS["refused"] += 1
        message = str(err)
        assert "\n" not in message, message
        # the key, by its name or its path: the mutated one or the block that holds it
        named = {str(path[-1]), ".".join(map(str, path)), ".".join(map(str, path[:-1]))}
        assert any(n and n in message for n in named), (kind, path, message)


# --- the command line ------------------------------------------------------------------------

KEYS = [".".join(map(str, p)) for p in PATHS]
VALUE_TEXT = st.one_of(st.text("abc01-.[]{}:,= '\"", max_size=8), st.integers().map(str),
                       st.sampled_from(["null", "true", "[]", "{}", "1e999", "-1", "nan"]))


@st.composite
def overrides(draw):
    kind = draw(st.sampled_from(["value", "profile", "unknown", "garbage"]))
    if kind == "value":
        return f"{draw(st.sampled_from(KEYS))}={draw(VALUE_TEXT)}"
    if kind == "profile":
        return f"profile={draw(st.text('abcdefghijklmnopqrstuvwxyz-_/.', min_size=1, max_size=10))}"
    if kind == "unknown":
        return f"+{draw(st.sampled_from(KEYS))}.zz_{draw(st.integers(0, 9))}={draw(VALUE_TEXT)}"
    return draw(st.text(max_size=12))


@settings(max_examples=CLI_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(overrides(), min_size=1, max_size=3))
def test_compose_params_refuses_a_bad_override_in_one_line(tmp_path, monkeypatch, given_overrides):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["compose-params", "--conf", str(ROOT / "conf"),
                                       *(a for o in given_overrides for a in ("-S", o))])
    COUNTS["cli"] = COUNTS.get("cli", 0) + 1
    if result.exit_code == 0:
        config.validate(yaml.safe_load((tmp_path / "params.yaml").read_text()))
        return
    assert result.exit_code == 2, (given_overrides, result.output)
    assert isinstance(result.exception, SystemExit), (given_overrides, result.exception)
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: "), (given_overrides, errors)


OPTIONS = ["--task", "--params", "--bench", "--jobs", "-j"]
ARGUMENT = st.one_of(st.sampled_from(OPTIONS), st.sampled_from(
    ["expr", "looped", "gpt", "small", "notebook", "standard-notebook-0", "0", "-1", "x"]),
    st.text(max_size=6))


@settings(max_examples=CLI_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["train", "evaluate", "render-figures", "estimate", "repro"]),
       st.lists(ARGUMENT, max_size=5))
def test_a_stage_command_refuses_bad_arguments_in_one_line(tmp_path, monkeypatch, command, args):
    """In a workspace with params and nothing else: whatever the arguments, one line and no
    traceback (valid ones stop at the first missing input)."""
    from tests.helpers import write_params

    if not (tmp_path / "params.yaml").exists():
        write_params(tmp_path)
    monkeypatch.chdir(tmp_path)
    if command in ("estimate", "repro") and not {"--help", "-h"} & set(args):
        args = [*args, "--definitely-not-an-option"]   # refused before it times or runs anything
    result = CliRunner().invoke(main, [command, *args])
    COUNTS["cli"] = COUNTS.get("cli", 0) + 1
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        command, args, repr(result.exception))
    assert result.exit_code in (1, 2), (command, args, result.output)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.strip() == errors[0], (command, args, result.stderr)


# --- damaged files ---------------------------------------------------------------------------

LOOPED_CELL = ["--task", "looped", "standard-notebook-0"]
RUN = "runs/looped/standard-notebook-0"
# each file a stage reads, and the stage that reads it
READS = {
    "data/looped/valid.parquet": ["train", "--task", "looped", "standard-notebook-0"],
    "data/looped/meta.json": ["train", "--task", "looped", "standard-notebook-0"],
    "data/looped/eval.parquet": ["evaluate", *LOOPED_CELL],
    f"{RUN}/model.pt": ["evaluate", *LOOPED_CELL],
    f"{RUN}/train.json": ["evaluate", *LOOPED_CELL],
    f"{RUN}/checkpoint.pt": ["train", "--task", "looped", "standard-notebook-0"],
    "metrics/looped/runs/standard-notebook-0.json": ["render-figures", "--task", "looped"],
    "plots/looped/eval/standard-notebook-0.csv": ["render-figures", "--task", "looped"],
}


@pytest.fixture(scope="module")
def readable(tmp_path_factory):
    """looped's data, one trained and evaluated cell, its checkpoint, and params naming it alone."""
    import shutil

    from arithrepro.checkout import working_dir as inside
    from tests.helpers import write_params

    ws = tmp_path_factory.mktemp("readable")
    write_params(ws, looped={"models": ["standard"]})
    with inside(ws):
        for args in (["generate-datasets", "--task", "looped"],
                     ["train", "--task", "looped", "standard-notebook-0"],
                     ["evaluate", *LOOPED_CELL]):
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 0, result.output
    # a checkpoint as a run killed part way leaves it
    (ws / RUN / "checkpoint.pt").write_bytes((ws / RUN / "model.pt").read_bytes())
    shutil.copyfile(ws / RUN / "model.pt", ws / "model.bak")
    return ws


EXAMPLES = 8   # per file: each runs a stage


@st.composite
def damages(draw, data: bytes, foreign: bytes):
    """(how, the damaged bytes)."""
    how = draw(st.sampled_from(["cut", "flip", "noise", "empty", "foreign"]))
    if how == "cut":
        return how, data[:draw(st.integers(0, max(0, len(data) - 1)))]
    if how == "flip":
        out = bytearray(data)
        for i in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=8)):
            out[i] ^= draw(st.integers(1, 255))
        return how, bytes(out)
    if how == "noise":
        return how, draw(st.binary(min_size=1, max_size=256))
    if how == "empty":
        return how, b""
    return how, foreign


@pytest.mark.parametrize("name", READS)
def test_a_damaged_file_stops_its_reader_in_one_line_naming_it(readable, tmp_path_factory, name):
    import shutil

    from arithrepro.checkout import working_dir as inside

    data = (readable / name).read_bytes()
    foreign = (readable / ("data/looped/meta.json" if name.endswith((".pt", ".parquet", ".csv"))
                           else f"{RUN}/model.pt")).read_bytes()
    base = tmp_path_factory.mktemp("damaged")

    @settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(damages(data, foreign))
    def check(damage):
        how, damaged = damage
        COUNTS["files"] = COUNTS.get("files", 0) + 1
        ws = base / "ws"
        shutil.rmtree(ws, ignore_errors=True)
        shutil.copytree(readable, ws)
        (ws / name).write_bytes(damaged)
        with inside(ws):
            result = CliRunner().invoke(main, READS[name])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            import traceback
            raise AssertionError(f"{how} {name}: " + "".join(
                traceback.format_exception(result.exception))[-3000:])
        if name.endswith("checkpoint.pt"):   # set aside with a warning, the run starts over
            assert result.exit_code == 0, (how, result.output)
            return
        if result.exit_code == 0:
            return
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert result.exit_code == 1 and len(errors) == 1, (how, name, result.stderr[-2000:])
        assert errors[0].startswith(f"error: {name}: "), (how, errors[0])

    check()
