"""A long-lived process that runs pipeline stages for `arithrepro repro`, one after another.

A stage run as its own processes pays for loading Python, DVC, torch and torch._dynamo (which
every torch.optim optimizer imports) each time, and a pipeline of 150 cells pays it 150 times;
a worker loads them once (the smoke pipeline: 117 s against 243 s, docs/development.md). Each job
it is given is a list of command lines, run in order until one fails: `dvc ...` through DVC's
own entry point (so locking, the run cache and dvc.lock are DVC's, exactly as on the command
line), and every `arithrepro ...` command, whether a job's or a stage's that DVC runs, through
arithrepro's. Anything else runs as a subprocess.

Requests arrive on stdin as JSON lines {"argv": [[...], ...], "log": path or null}; the exit
status of each job goes back as a line on the file descriptor given as the first argument.
While a job runs, file descriptors 1 and 2 point at its log (when it has one), so its output,
a subprocess's included, lands there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import traceback

from arithrepro.checkout import working_dir


def run_arithrepro(args: list[str]) -> int:
    """`arithrepro ARGS` in this process; its exit status."""
    import click

    from arithrepro import params_reads
    from arithrepro.cli import main

    try:
        main(args, prog_name="arithrepro", standalone_mode=False)
        return 0
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except click.exceptions.ClickException as err:
        err.show()
        return err.exit_code
    except click.exceptions.Abort:
        return 1
    except Exception:  # noqa: BLE001 - as the interpreter would: the traceback, then status 1
        traceback.print_exc()
        return 1
    finally:   # this command's params reads, as its own process would write them at exit
        params_reads.flush(args)


@contextlib.contextmanager
def _logging_kept():
    """Loggers' levels as they were: a command that quiets DVC's (dvclive does, in training)
    would otherwise quiet every later stage's."""
    import logging

    loggers = [logging.root, *(v for v in logging.root.manager.loggerDict.values()
                               if isinstance(v, logging.Logger))]
    kept = [(lg, lg.level, lg.disabled) for lg in loggers]
    try:
        yield
    finally:
        for lg, level, disabled in kept:
            lg.setLevel(level)
            lg.disabled = disabled


def run_argv(argv: list[str]) -> int:
    with _logging_kept():
        return _run_argv(argv)


def _run_argv(argv: list[str]) -> int:
    if argv[0] == "dvc":
        from dvc.cli import main

        return main(argv[1:])
    if argv[0] == "arithrepro":
        return run_arithrepro(argv[1:])
    return subprocess.call(argv)


@contextlib.contextmanager
def _environ(changes: dict):
    old = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def patch_dvc() -> None:
    """DVC runs a stage whose commands are all arithrepro's in this process (the environment
    DVC gives a stage's command, and its working directory, set around it)."""
    import dvc.stage.run as stage_run
    from dvc.env import DVC_ROOT, DVC_STAGE
    from dvc.stage.exceptions import StageCmdFailedError

    plain = stage_run.cmd_run

    def cmd_run(stage, dry=False, run_env=None):
        commands = stage_run._enforce_cmd_list(stage.cmd)
        if not all(shlex.split(c)[:1] == ["arithrepro"] for c in commands):
            return plain(stage, dry=dry, run_env=run_env)
        stage_run.logger.info("Running stage '%s':", stage.addressing)
        env = {DVC_ROOT: stage.repo.root_dir, **(run_env or {}), DVC_STAGE: stage.addressing}
        for cmd in commands:
            stage_run.display_command(cmd)
            if dry:
                continue
            sys.stdout.flush()
            with _environ(env), working_dir(stage.wdir), _logging_kept():
                code = run_arithrepro(shlex.split(cmd)[1:])
            _flush()
            if code:
                raise StageCmdFailedError(cmd, code)

    stage_run.cmd_run = cmd_run


def patch_lock_writes() -> None:
    """DVC records each stage by reading dvc.lock with ruamel's pure-Python round-trip loader
    (which keeps comments and styles), updating the stage's entry and writing the file over
    itself. dvc.lock is DVC's own output and holds neither, so the worker reads it with the C
    loader (the same values in a fifth of the time: a 128 kB lock, the smoke profile's, 0.23 s
    against 1.3 s on an AVX2 EPYC; the lock grows with the pipeline, and every stage pays it
    under DVC's repository lock), writes the entries the stage changed with DVC's own dumper
    and keeps the others' text as it was (the same bytes as dumping them all, in a tenth of the
    time: tests/test_stage_worker.py), and replaces the file whole, so a worker killed mid-write
    leaves the previous lock, not a cut one. Every other YAML file DVC updates (dvc.yaml) keeps
    DVC's round trip."""
    import dvc.dvcfile as dvcfile
    from dvc.fs import LocalFileSystem

    plain = dvcfile.modify_yaml
    if getattr(plain, "lock_fast", False):
        return

    @contextlib.contextmanager
    def modify_yaml(path, fs=None):
        if os.path.basename(os.fspath(path)) != "dvc.lock" or not (
                fs is None or isinstance(fs, LocalFileSystem)):
            with plain(path, fs=fs) as data:
                yield data
            return
        with lock_data(path) as data:
            yield data

    modify_yaml.lock_fast = True
    dvcfile.modify_yaml = modify_yaml


def patch_yaml_reads() -> None:
    """DVC parses dvc.yaml, dvc.lock and params.yaml again for each stage it runs, with ruamel's
    safe loader, whose constructor is pure Python (about 0.3 s of every stage on the smoke
    pipeline, most of it the lock's). The worker keeps the values of the last few texts it
    parsed, as JSON, and hands DVC a fresh copy of them when the same text comes again: the
    same values in new objects, so what DVC changes in one stays out of the next
    (tests/test_stage_worker.py). A value JSON cannot carry (a date, a key that is not a
    string) is parsed every time."""
    readers = yaml_readers()
    plain = readers[0].parse_yaml
    if getattr(plain, "kept", False):
        return

    def parse_yaml(text, path, typ="safe"):
        if typ != "safe" or not isinstance(text, str):
            return plain(text, path, typ)
        kept = _PARSED.pop(text, None)
        if kept is None:
            value = plain(text, path, typ)
            try:
                kept = _json(value)
            except (TypeError, ValueError):
                return value
        else:
            value = json.loads(kept)
        _PARSED[text] = kept   # the most recent last
        while len(_PARSED) > 8:
            del _PARSED[next(iter(_PARSED))]
        return value

    parse_yaml.kept = True
    for module in readers:
        module.parse_yaml = parse_yaml


def yaml_readers() -> tuple:
    """DVC's modules that hold the YAML parser under the name they call it by (the defining
    module first): what `patch_yaml_reads` replaces."""
    import dvc.utils.serialize as serialize
    import dvc.utils.serialize._yaml as yaml_module
    import dvc.utils.strictyaml as strictyaml

    return yaml_module, serialize, strictyaml


_PARSED: dict[str, str] = {}   # a YAML text -> its values as JSON, oldest first


@contextlib.contextmanager
def lock_data(path):
    """dvc.lock's contents to update in place, then written back (atomically) as DVC writes it;
    {} where there is no file yet."""
    from dvc.utils.serialize._yaml import parse_yaml

    from arithrepro.io import write_text

    path = os.fspath(path)
    text, data = "", {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fd:
            text = fd.read()
        data = parse_yaml(text, path)   # DVC's parser, typ "safe": the C loader
    kept = _entries(text, data)
    yield data
    write_text(path, _spliced(data, kept) or _dumped(data))


# a stage's entry in a lock file DVC's dumper wrote: its name at two spaces' indent (what the
# entry holds is indented further; a blank line in a multi-line string has no indent)
_ENTRY = re.compile(r"^  (?=\S)", flags=re.M)
# an anchor or alias: the dumper numbers them through the whole file, so no entry stands alone
_ALIAS = re.compile(r"[&*]id\d{3}")


def _entries(text: str, data: dict):
    """(the text before the first stage's entry, what the top-level keys but the stages hold,
    {stage: (its entry's text, its value as JSON)}) of a lock file whose stages are its last
    key, one entry per stage in their order, without anchors; None for any other file (it is
    written whole)."""
    top = _top(data)
    if top is None or _ALIAS.search(text):
        return None
    stages = data["stages"]
    starts = [m.start() for m in _ENTRY.finditer(text)]
    head = text[:starts[0]] if starts else ""
    if len(starts) != len(stages) or not head.endswith("\nstages:\n") \
            or re.search(r"^\s", head, flags=re.M):
        return None
    ends = [*starts[1:], len(text)]
    try:
        return head, top, {
            name: (text[a:b], _json(entry))
            for (name, entry), a, b in zip(stages.items(), starts, ends)}
    except (TypeError, ValueError):
        return None


def _spliced(data: dict, kept) -> str | None:
    """The lock's text with the entries whose values are as they were kept as they were and
    the others dumped, or None where that cannot be done."""
    if kept is None:
        return None
    head, top, before = kept
    if _top(data) != top:
        return None
    parts = [head]
    try:
        for name, entry in data["stages"].items():
            old = before.get(name)
            if old is not None and old[1] == _json(entry):
                parts.append(old[0])
                continue
            new = _dumped({"stages": {name: entry}})
            if _ALIAS.search(new) or not new.startswith("stages:\n"):
                return None
            parts.append(new.removeprefix("stages:\n"))
    except (TypeError, ValueError):
        return None
    return "".join(parts)


def _top(data) -> str | None:
    """The top-level keys but the stages, as JSON, of a lock whose stages are a non-empty
    mapping and its last key; None for any other."""
    stages = data.get("stages") if isinstance(data, dict) else None
    if not stages or not isinstance(stages, dict) or list(data)[-1] != "stages":
        return None
    try:
        return _json({k: v for k, v in data.items() if k != "stages"})
    except (TypeError, ValueError):
        return None


def _json(value) -> str:
    """The value as JSON, which tells 1, 1.0 and true apart; ValueError for a key that is not a
    string (JSON would write 1 and "1" alike)."""
    def keys(v):
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise ValueError("a key that is not a string")
            for item in v.values():
                keys(item)
        elif isinstance(v, list):
            for item in v:
                keys(item)

    keys(value)
    return json.dumps(value)


def _dumped(data) -> str:
    import io

    from dvc.utils.serialize._yaml import _dump

    out = io.StringIO()
    _dump(data, out)
    return out.getvalue()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


@contextlib.contextmanager
def _output_to(log: str | None):
    """fds 1 and 2 (and so sys.stdout, sys.stderr and subprocesses) to `log` meanwhile."""
    if not log:
        yield
        return
    _flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        _flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def run_job(argv: list[list[str]], log: str | None) -> int:
    with _output_to(log):
        for command in argv:
            if log:
                print("$ " + shlex.join(command), flush=True)
            code = run_argv(command)
            _flush()
            if code:
                return code
    return 0


def main() -> None:
    replies = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    patch_dvc()
    patch_lock_writes()
    patch_yaml_reads()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            code = run_job(request["argv"], request.get("log"))
        except Exception:  # noqa: BLE001 - one job's failure is its status, not the worker's end
            traceback.print_exc()
            code = 1
        replies.write(json.dumps({"code": code}) + "\n")


if __name__ == "__main__":
    main()
