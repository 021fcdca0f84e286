"""An LLM on expr's problems through any OpenAI-compatible endpoint (the llm-expr stage;
docs/bench.md, "LLMs on the same problems").

The expr source's protocol: temperature 0, the system prompt "Answer the math question.", the
problem up to and including `=` as the user message, and an integer as structured output (a
strict JSON schema, `{"answer": <integer>}`); an answer is right when that integer, written out,
is the problem's answer.

Each answer is appended to the endpoint's answers file as it arrives (a JSON line, flushed),
which the stage keeps across runs (DVC `persist`): a run cut short resumes with the problems not
yet answered, a finished one is not asked again, and DVC caches and pushes the file like any
other output. The file's first line is the fingerprint of what was asked (endpoint, model,
protocol, problems); answers to anything else are not reused. The key is read from the
environment variable the params name, handed to the client and written nowhere.

What goes wrong is an answer too: a reply that is not an integer (malformed), a refusal, a
timeout, or an error the client's retries (with backoff, on rate limits and server errors) did
not get past is counted as wrong, by kind, and never stops the stage.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SYSTEM = "Answer the math question."
# the structured output: an object holding one integer
SCHEMA = {"type": "json_schema",
          "json_schema": {"name": "MathAnswer", "strict": True,
                          "schema": {"type": "object", "properties": {"answer": {"type": "integer"}},
                                     "required": ["answer"], "additionalProperties": False}}}
KINDS = ("right", "wrong", "malformed", "refused", "timeout", "error")
REPLY_CHARS = 200   # what the answers file keeps of a reply


def fingerprint(endpoint: dict, problems: list[dict]) -> str:
    """What the answers depend on: the endpoint, the model, the protocol and the problems."""
    what = [endpoint["base_url"], endpoint["model"], SYSTEM, SCHEMA,
            [(p["split"], p["problem"], p["answer"]) for p in problems]]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def client_for(endpoint: dict, timeout_s: float, max_retries: int):
    """The OpenAI client for an endpoint, its key from the environment variable it names."""
    try:
        from openai import OpenAI
    except ImportError:
        raise ValueError("llm: the openai package is missing; install the llm extra "
                         "(pip install 'arithrepro[llm]')") from None

    name = endpoint["key_env"]
    key = os.environ.get(name)
    if not key:
        raise ValueError(f"llm: the environment variable {name} (the endpoint's key) is not set")
    return OpenAI(base_url=endpoint["base_url"], api_key=key, timeout=timeout_s,
                  max_retries=max_retries)


def judge(reply: str | None, truth: str) -> tuple[str, int | None]:
    """(kind, the integer given) of a reply's content."""
    try:
        given = json.loads(reply or "")["answer"]
    except (json.JSONDecodeError, TypeError, KeyError):
        return "malformed", None
    if isinstance(given, bool) or not isinstance(given, int):
        return "malformed", None
    return ("right" if str(given) == truth else "wrong"), given


def ask(client, model: str, problem: dict) -> dict:
    """One problem's answer: {kind, given, reply}; never raises for what an endpoint does."""
    import openai

    try:
        out = client.chat.completions.create(
            model=model, temperature=0.0, response_format=SCHEMA,
            messages=[{"role": "system", "content": SYSTEM},
                      {"role": "user", "content": problem["problem"] + "="}])
    except openai.APITimeoutError:
        return {"kind": "timeout", "given": None, "reply": None}
    except openai.APIError as err:   # what the retries did not get past, a refused request too
        status = getattr(err, "status_code", None)
        return {"kind": "error", "given": None,
                "reply": f"{type(err).__name__}" + (f" ({status})" if status else "")}
    if not out.choices:
        return {"kind": "malformed", "given": None, "reply": None}
    message = out.choices[0].message
    if getattr(message, "refusal", None):
        return {"kind": "refused", "given": None, "reply": message.refusal[:REPLY_CHARS]}
    kind, given = judge(message.content, problem["answer"])
    return {"kind": kind, "given": given, "reply": (message.content or "")[:REPLY_CHARS]}


def answered(path: Path, print_: str) -> dict:
    """{(split, index): answer} already in the answers file, if it was made for `print_`."""
    if not path.is_file():
        return {}
    lines = path.read_text().splitlines()
    try:
        head = json.loads(lines[0]) if lines else {}
    except json.JSONDecodeError:
        head = {}
    if head.get("fingerprint") != print_:
        return {}
    out = {}
    for line in lines[1:]:
        try:
            row = json.loads(line)
            out[(row["split"], row["index"])] = row
        except (json.JSONDecodeError, KeyError, TypeError):
            break   # a line cut short by a kill: the answers after it are asked again
    return out


def run(client, endpoint: dict, problems: list[dict], path: Path, concurrency: int = 1,
        progress=None) -> list[dict]:
    """Every problem's answer, resumed from `path` and appended to it as they arrive."""
    print_ = fingerprint(endpoint, problems)
    done = answered(path, print_)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the file again from what is reusable (a line cut short, or another fingerprint's, dropped)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps({"fingerprint": print_}) + "\n")
        for row in done.values():
            f.write(json.dumps(row) + "\n")
    tmp.replace(path)
    todo = [p for p in problems if (p["split"], p["index"]) not in done]
    if progress:
        progress(len(problems) - len(todo))
    with open(path, "a") as f, ThreadPoolExecutor(max(1, concurrency)) as pool:
        for problem, answer in zip(todo, pool.map(lambda p: ask(client, endpoint["model"], p), todo)):
            row = {"split": problem["split"], "index": problem["index"],
                   "length": problem["length"], "problem": problem["problem"],
                   "answer": problem["answer"], **answer}
            f.write(json.dumps(row) + "\n")
            f.flush()
            done[(row["split"], row["index"])] = row
            if progress:
                progress(1)
    return [done[(p["split"], p["index"])] for p in problems]


def problems_of(data_dir: Path, splits: list[str], limit: int) -> list[dict]:
    """The first `limit` problems (0: all) of each split, as the expr task wrote them."""
    from arithrepro.tasks.expr import TASK

    out = []
    for split in splits:
        frame = TASK.read_split(data_dir, f"{split}.parquet", ("problem", "answer", "length"))
        if limit:
            frame = frame.head(limit)
        out += [{"split": split, "index": i, "problem": str(p), "answer": str(a), "length": int(n)}
                for i, (p, a, n) in enumerate(zip(frame["problem"], frame["answer"], frame["length"]))]
    return out


def score(rows: list[dict]) -> dict:
    """Accuracy overall and per split, the count of each kind, and accuracy by length."""
    def acc(part):
        return sum(r["kind"] == "right" for r in part) / len(part) if part else None

    splits = sorted({r["split"] for r in rows})
    by_length = {}
    for r in rows:
        by_length.setdefault((r["split"], r["length"]), []).append(r)
    return {"n": len(rows), "accuracy": acc(rows),
            **{f"{s}_acc": acc([r for r in rows if r["split"] == s]) for s in splits},
            "kinds": {k: sum(r["kind"] == k for r in rows) for k in KINDS},
            "by_length": [{"split": s, "length": n, "n": len(part), "accuracy": acc(part)}
                          for (s, n), part in sorted(by_length.items())]}


def _env_name(key, value) -> None:
    import re

    from arithrepro.schema import fail

    # a name, never the key itself: keys hold lower-case letters and dashes
    if not isinstance(value, str) or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", value):
        fail(key, value, "the name of an environment variable (upper-case letters, digits, _)")


def _text(key, value) -> None:
    from arithrepro.schema import fail

    if not isinstance(value, str) or not value:
        fail(key, value, "a non-empty string")


def schema() -> dict:
    """params.yaml's llm block."""
    from arithrepro.schema import Map, choice, integer, list_of, number

    return {"endpoints": list_of(_text, min_len=0),
            "at": Map({"base_url": _text, "model": _text, "key_env": _env_name}),
            "splits": list_of(choice("test", "ood")), "limit": integer(0),
            "timeout_s": number(0, lo_open=True), "max_retries": integer(0, 20),
            "concurrency": integer(1, 64)}


def check(params: dict) -> None:
    from arithrepro.schema import ParamsError

    p = params["llm"]
    for name in p["endpoints"]:
        if name not in p["at"]:
            raise ParamsError(f"llm.endpoints: {name!r} is not an endpoint of llm.at "
                              f"({', '.join(p['at'])})")
