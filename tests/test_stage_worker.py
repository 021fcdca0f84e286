"""The stage worker's dvc.lock writes (arithrepro/stage_worker.py): the C loader in, DVC's own
dumper out, so the file is byte for byte what DVC's round trip writes, except that no value
outside the updated entry changes (DVC's round trip can rewrite a float's last digit)."""

import contextlib
from collections import OrderedDict

import dvc.dvcfile as dvcfile
import pytest
from dvc.utils.serialize._yaml import dumps_yaml, modify_yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arithrepro import stage_worker

# every character a YAML file can hold but U+0085, which ruamel writes as a line break that no
# loader reads back (DVC's round trip and the C loader alike); lone surrogates cannot be in a
# UTF-8 params file, and DVC reads dvc.lock with the C loader on every command anyway
def text(**size):
    return st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x85"),
                   **size)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12),
    # a params file's floats: a few significant digits at any scale (1e-08, 0.006, 3.5e5)
    st.builds(lambda n, e: float(f"{n}e{e}"), st.integers(-10**6, 10**6), st.integers(-12, 12)),
    text(max_size=90),
    # strings YAML would read as something else unless quoted, and paths longer than a line
    st.sampled_from(["1e-08", "0.10", "yes", "on", "null", "~", "- a", "a: b", "#x", " lead",
                     "runs/modular/regularization/lstm-std-regularization.wd0.5-0/live/plots/"
                     "metrics/train/loss.tsv"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(text(min_size=1, max_size=12), inner, max_size=3),
                      max_leaves=12)
stage = st.fixed_dictionaries({
    "cmd": text(min_size=1, max_size=100),
    "deps": st.lists(st.fixed_dictionaries({"path": text(min_size=1, max_size=100),
                                            "hash": st.just("md5"),
                                            "md5": st.text("0123456789abcdef", min_size=32,
                                                           max_size=32),
                                            "size": st.integers(0, 10**9)}), max_size=2),
    "params": st.fixed_dictionaries({"params.yaml": st.dictionaries(
        text(min_size=1, max_size=20), values, max_size=4)}),
})
locks = st.dictionaries(text(min_size=1, max_size=30), stage, min_size=1, max_size=4)


def written(path, update, modify) -> bytes:
    with modify(path) as data:
        update(data)
    return path.read_bytes()


def updated(before: dict, changed: dict) -> tuple[str, callable]:
    """A lock file as DVC wrote it, and an update as DVC makes it: entries replaced or added
    (serialize.to_lockfile's OrderedDicts)."""
    def update(data):
        data["stages"] = data.get("stages", {})
        data["stages"].update(OrderedDict((k, OrderedDict(v)) for k, v in changed.items()))

    return dumps_yaml({"schema": "2.0", "stages": before}), update


def both(tmp_path, lock_text, update) -> tuple[bytes, bytes]:
    """The bytes the worker's write and DVC's round trip leave for the same update."""
    ours, theirs = tmp_path / "ours" / "dvc.lock", tmp_path / "theirs" / "dvc.lock"
    for path in (ours, theirs):
        path.parent.mkdir(exist_ok=True)
        path.write_text(lock_text, encoding="utf-8")
    return written(ours, update, stage_worker.lock_data), written(theirs, update, modify_yaml)


SLOW = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                  HealthCheck.function_scoped_fixture])


@settings(max_examples=40, **SLOW)
@given(before=locks, changed=locks)
def test_a_lock_update_writes_the_bytes_dvcs_round_trip_writes(tmp_path, before, changed):
    ours, theirs = both(tmp_path, *updated(before, changed))
    assert ours == theirs


@settings(max_examples=20, **SLOW)
@given(before=locks, changed=locks, big=st.floats(1e16, 1e300))
def test_no_value_outside_the_update_changes(tmp_path, before, changed, big):
    """Any float: the worker writes each as DVC's dumper writes that value, where DVC's round
    trip may give another (3.816250540114208e+18 comes back ...207e+18)."""
    before = {**before, "far": {"cmd": "x", "params": {"params.yaml": {"f": big}}}}
    changed = {k: v for k, v in changed.items() if k != "far"}
    text, update = updated(before, changed)
    ours, _ = both(tmp_path, text, update)
    assert ours.decode() == dumps_yaml({"schema": "2.0", "stages": {**before, **changed}})


@settings(max_examples=20, **SLOW)
@given(before=locks, data=st.data())
def test_an_entry_removed_or_the_stages_reordered_writes_dvcs_bytes(tmp_path, before, data):
    """Where the kept text cannot be spliced in order (an entry gone, the stages in another
    order), the worker writes the file as DVC would."""
    names = list(before)
    gone = data.draw(st.sampled_from(names))
    order = data.draw(st.permutations([n for n in names if n != gone]))

    def update(lock):
        stages = lock["stages"]
        lock["stages"] = {name: stages[name] for name in order}

    ours, theirs = both(tmp_path, dumps_yaml({"schema": "2.0", "stages": before}), update)
    assert ours == theirs


def test_only_the_entry_that_changed_is_dumped(tmp_path, monkeypatch):
    """A stage recorded in a lock of many: its entry is the only YAML written, the others' text
    is kept, and the file is DVC's bytes."""
    before = {f"train@{i}": {"cmd": f"arithrepro train {i}", "deps": [
        {"path": f"runs/run-{i}/a/path/long/enough/to/be/wrapped/by/the/dumper/at/eighty/"
                 "columns.tsv", "hash": "md5", "md5": f"{i:032x}", "size": i}],
        "params": {"params.yaml": {"eps": 1e-08, "steps": i, "on": "yes"}}} for i in range(20)}
    changed = {"train@7": {**before["train@7"], "cmd": "arithrepro train 7 again"},
               "train@20": before["train@0"]}
    dumped = []
    plain = stage_worker._dumped
    monkeypatch.setattr(stage_worker, "_dumped", lambda d: dumped.append(d) or plain(d))
    ours, theirs = both(tmp_path, *updated(before, changed))
    assert ours == theirs
    assert [list(d["stages"]) for d in dumped] == [["train@7"], ["train@20"]]


def test_the_first_lock_and_only_the_lock_take_the_fast_path(tmp_path, monkeypatch):
    """With no dvc.lock yet the worker writes DVC's first one; dvc.yaml, which users comment,
    goes through DVC's round trip (its comments kept); nothing is left beside the files."""
    monkeypatch.setattr(dvcfile, "modify_yaml", dvcfile.modify_yaml)   # undone after the test
    stage_worker.patch_lock_writes()
    stage_worker.patch_lock_writes()   # twice: wrapped once
    assert dvcfile.modify_yaml.lock_fast and not getattr(modify_yaml, "lock_fast", False)

    lock = tmp_path / "dvc.lock"
    with dvcfile.modify_yaml(lock) as data:
        data.update({"schema": "2.0", "stages": {"a": OrderedDict(cmd="true")}})
    assert lock.read_text() == dumps_yaml({"schema": "2.0", "stages": {"a": {"cmd": "true"}}})

    pipeline = tmp_path / "dvc.yaml"
    pipeline.write_text("# the stages\nstages:\n  a:\n    cmd: echo a  # says a\n")
    with dvcfile.modify_yaml(pipeline) as data:
        data["stages"]["a"]["cmd"] = "echo b"
    assert pipeline.read_text() == "# the stages\nstages:\n  a:\n    cmd: echo b  # says a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dvc.lock", "dvc.yaml"]


def test_a_write_that_fails_leaves_the_lock_as_it_was(tmp_path):
    lock = tmp_path / "dvc.lock"
    lock.write_text(dumps_yaml({"schema": "2.0", "stages": {"a": {"cmd": "true"}}}))
    before = lock.read_bytes()
    with pytest.raises(RuntimeError), contextlib.ExitStack() as stack:
        data = stack.enter_context(stage_worker.lock_data(lock))
        data["stages"]["b"] = {"cmd": "x"}
        raise RuntimeError("the stage's entry could not be made")
    assert lock.read_bytes() == before


def _same(a, b) -> bool:
    """Equal values of the same types all the way down (1, 1.0 and True are not the same)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)   # NaN


@pytest.fixture
def kept_reads(monkeypatch):
    """The worker's YAML reads patched in for one test (undone after it): the parser as the
    worker's DVC calls it, and DVC's own."""
    import dvc.utils.serialize as serialize
    import dvc.utils.serialize._yaml as yaml_module
    import dvc.utils.strictyaml as strictyaml

    assert stage_worker.yaml_readers() == (yaml_module, serialize, strictyaml)
    plain = yaml_module.parse_yaml
    for module in stage_worker.yaml_readers():
        monkeypatch.setattr(module, "parse_yaml", plain)
    monkeypatch.setattr(stage_worker, "_PARSED", {})
    stage_worker.patch_yaml_reads()
    stage_worker.patch_yaml_reads()   # twice: wrapped once
    assert yaml_module.parse_yaml is serialize.parse_yaml is strictyaml.parse_yaml is not plain
    assert yaml_module.parse_yaml.kept and not getattr(plain, "kept", False)
    return yaml_module.parse_yaml, plain


@settings(max_examples=60, **SLOW)
@given(value=st.dictionaries(text(min_size=1, max_size=12), values, max_size=4))
def test_a_text_read_again_gives_the_same_values_in_new_objects(kept_reads, value):
    parse, plain = kept_reads
    text = dumps_yaml(value)
    first, again = parse(text, "x"), parse(text, "x")
    assert _same(first, plain(text, "x")) and _same(again, plain(text, "x"))
    first["changed by DVC"] = []
    assert _same(parse(text, "x"), plain(text, "x")) and again is not first


def test_values_json_cannot_carry_are_parsed_every_time_and_the_kept_texts_are_few(kept_reads):
    parse, plain = kept_reads
    dated = "when: 2024-05-01\nsteps: 3\n"
    assert _same(parse(dated, "x"), plain(dated, "x")) and dated not in stage_worker._PARSED
    numbered = "1: one\n"
    assert parse(numbered, "x") == {1: "one"} and numbered not in stage_worker._PARSED
    for i in range(20):
        parse(f"steps: {i}\n", "x")
    assert list(stage_worker._PARSED) == [f"steps: {i}\n" for i in range(12, 20)]
    with pytest.raises(Exception, match="corrupted"):
        parse("a: [1,", "broken.yaml")
