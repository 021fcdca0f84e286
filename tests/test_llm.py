"""The LLM baseline (arithrepro/llm.py, stages/llm.py) against a real server on loopback that
speaks the OpenAI chat completions API (arithrepro/serve.py: one of the project's expr models),
through the real client library: the source's protocol, retries on rate limits and server
errors, malformed answers, refusals and timeouts counted as wrong, a run killed midway resumed
by `dvc repro`, a finished one not asked again, and the key written nowhere."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from arithrepro import llm
from arithrepro.schema import ParamsError
from arithrepro.serve import Handler, content_for, server
from tests.workspace import sh

# made afresh per session, so that no file holds it unless something wrote it there (this
# file's text included)
SECRET = "sk-test-" + secrets.token_hex(8)


def tiny_expr_model(path: Path) -> Path:
    """An untrained GPT with expr's vocabulary, saved as a train stage saves a model."""
    from arithrepro.io import save_torch
    from arithrepro.models.registry import build_model
    from arithrepro.tasks.expr import PAD, VOCAB

    size = {"d_model": 8, "d_ff": 16, "d_sa": 8, "layers": 1, "heads": 2}
    dims = {"vocab_size": len(VOCAB), "max_len": 24, "pad_id": PAD}
    torch.manual_seed(0)
    net = build_model("gpt", size, dropout=0.0, **dims)
    save_torch(path, {"model": "gpt", "size": size, "dropout": 0.0, "dims": dims,
                      "form": "tokens", "state_dict": net.state_dict()})
    return path


class Serving:
    """A server in a thread of this process, on a free loopback port."""

    def __init__(self, model: Path, handler=Handler, key_env: str | None = None):
        self.httpd = server(model, port=0, key_env=key_env, handler=handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def problem_set(n: int = 12) -> list[dict]:
    return [{"split": "test" if i < n // 2 else "ood", "index": i, "problem": f"{i}+{i}*2",
             "answer": str(3 * i), "length": len(f"{i}+{i}*2")} for i in range(n)]


# --- the pieces ---------------------------------------------------------------------------

@pytest.mark.parametrize("reply,kind,given", [
    ('{"answer": 12}', "right", 12), ('{"answer": -3}', "wrong", -3),
    ('{"answer": "12"}', "malformed", None), ('{"answer": 12.0}', "malformed", None),
    ('{"answer": true}', "malformed", None), ("12", "malformed", None), ("twelve", "malformed", None),
    ('{"result": 12}', "malformed", None), (None, "malformed", None), ("", "malformed", None),
])
def test_a_reply_is_right_only_as_the_integer_of_the_answer(reply, kind, given):
    assert llm.judge(reply, "12") == (kind, given)


def test_answers_resume_only_for_the_same_questions_and_drop_a_cut_line(tmp_path):
    problems = problem_set(4)
    path = tmp_path / "answers.jsonl"
    mark = llm.fingerprint({"base_url": "u", "model": "m"}, problems)
    rows = [{"split": p["split"], "index": p["index"], "kind": "right"} for p in problems[:3]]
    path.write_text(json.dumps({"fingerprint": mark}) + "\n" + json.dumps(rows[0]) + "\n"
                    + json.dumps(rows[1]) + "\n" + json.dumps(rows[2])[:9])
    assert set(llm.answered(path, mark)) == {("test", 0), ("test", 1)}
    other = llm.fingerprint({"base_url": "u", "model": "another"}, problems)
    assert llm.answered(path, other) == {}


@pytest.mark.parametrize("change,message", [
    (lambda p: p["llm"]["at"]["local"].update(key_env="sk-abc123"),
     "llm.at.local.key_env = 'sk-abc123': expected the name of an environment variable"),
    (lambda p: p["llm"]["at"]["local"].update(api_key="sk-abc123"), "llm.at.local.api_key: unknown key"),
    (lambda p: p["llm"].update(endpoints=["elsewhere"]),
     "llm.endpoints: 'elsewhere' is not an endpoint of llm.at"),
])
def test_the_params_hold_no_key_and_name_known_endpoints(params, change, message):
    from arithrepro import config

    change(params)
    with pytest.raises(ParamsError, match=message):
        config.validate(params)


def test_serve_refuses_a_model_of_another_task(tmp_path):
    from arithrepro.io import save_torch
    from arithrepro.models.registry import build_model

    size = {"d_model": 8, "d_ff": 16, "layers": 1, "heads": 2}
    net = build_model("standard", size, dropout=0.0, base=10, classes=10, max_len=8)
    save_torch(tmp_path / "model.pt", {"model": "standard", "size": size, "dropout": 0.0,
                                       "dims": {"base": 10, "classes": 10, "max_len": 8},
                                       "state_dict": net.state_dict()})
    with pytest.raises(ValueError, match="not a model trained on expr"):
        server(tmp_path / "model.pt")


# --- faults, through the real client ------------------------------------------------------

class Faulty(Handler):
    """The project's server, with a fault on some problems: the first two requests are rate
    limited, one problem fails once and one always, one is too slow, one answer is not an
    integer and one is refused."""

    seen: list = []
    lock = threading.Lock()

    def respond(self, request):
        problem = request["messages"][-1]["content"]
        with self.lock:
            self.seen.append((problem, request))
            count, attempts = len(self.seen), sum(p == problem for p, _ in self.seen)
        if count <= 2:
            return self._send(429, {"error": {"message": "slow down", "type": "rate_limit"}},
                              {"retry-after-ms": "5"})
        if problem == "1+1*2=" and attempts == 1:
            return self._send(500, {"error": {"message": "hiccup"}}, {"retry-after-ms": "5"})
        if problem == "2+2*2=":
            return self._send(503, {"error": {"message": "down"}}, {"retry-after-ms": "5"})
        if problem == "3+3*2=":
            time.sleep(0.6)
        if problem == "4+4*2=":
            return self._send(200, self.completion(request, "nine"))
        if problem == "5+5*2=":
            return self._send(200, self.completion(request, None, refusal="I cannot help."))
        return super().respond(request)


def test_faults_are_counted_as_wrong_and_never_stop_the_run(tmp_path, monkeypatch):
    model = tiny_expr_model(tmp_path / "model.pt")
    problems = problem_set(12)
    monkeypatch.setenv("ARITHREPRO_TEST_KEY", SECRET)
    Faulty.seen = []
    with Serving(model, Faulty, key_env="ARITHREPRO_TEST_KEY") as srv:
        endpoint = {"base_url": srv.url, "model": "arithrepro", "key_env": "ARITHREPRO_TEST_KEY"}
        client = llm.client_for(endpoint, timeout_s=0.3, max_retries=2)
        rows = llm.run(client, endpoint, problems, tmp_path / "answers.jsonl", concurrency=1)
        answerer = srv.httpd.RequestHandlerClass.answerer
        expected = {p["problem"]: content_for(answerer, p["problem"] + "=") for p in problems}
    kinds = {r["problem"]: r["kind"] for r in rows}
    assert kinds["2+2*2"] == "error" and kinds["3+3*2"] == "timeout"
    assert kinds["4+4*2"] == "malformed" and kinds["5+5*2"] == "refused"
    # the rate-limited requests and the server error were retried: their problems are scored
    # on the model's own reply, like every other problem
    for p in problems:
        if p["problem"] not in ("2+2*2", "3+3*2", "4+4*2", "5+5*2"):
            assert kinds[p["problem"]] == llm.judge(expected[p["problem"]], p["answer"])[0]
    asked = [problem for problem, _ in Faulty.seen]
    assert asked[:3] == ["0+0*2="] * 3 and asked.count("1+1*2=") == 2
    assert asked.count("2+2*2=") == 3 and asked.count("3+3*2=") == 3   # 1 + max_retries
    # the source's protocol, as sent by the client
    _, body = Faulty.seen[-1]
    assert body["temperature"] == 0.0 and body["model"] == "arithrepro"
    assert body["messages"][0] == {"role": "system", "content": "Answer the math question."}
    assert body["response_format"]["json_schema"]["schema"]["properties"] == {"answer": {"type": "integer"}}
    scores = llm.score(rows)
    assert scores["n"] == 12 and sum(scores["kinds"].values()) == 12
    assert scores["kinds"]["error"] == scores["kinds"]["timeout"] == scores["kinds"]["refused"] == 1
    assert {b["split"] for b in scores["by_length"]} == {"test", "ood"}
    assert SECRET not in (tmp_path / "answers.jsonl").read_text()


def test_a_request_without_the_key_is_refused_and_counted(tmp_path, monkeypatch):
    model = tiny_expr_model(tmp_path / "model.pt")
    monkeypatch.setenv("ARITHREPRO_TEST_KEY", SECRET)
    monkeypatch.setenv("WRONG_KEY", "sk-wrong")
    with Serving(model, key_env="ARITHREPRO_TEST_KEY") as srv:
        endpoint = {"base_url": srv.url, "model": "m", "key_env": "WRONG_KEY"}
        rows = llm.run(llm.client_for(endpoint, 2, 0), endpoint, problem_set(2),
                       tmp_path / "answers.jsonl")
    assert [r["kind"] for r in rows] == ["error", "error"]
    assert rows[0]["reply"] == "AuthenticationError (401)"


# --- the stage, killed and resumed in a workspace ----------------------------------------

class Slow(Handler):
    count = [0]   # shared with the subclass the server binds

    def respond(self, request):
        self.count[0] += 1
        time.sleep(0.02)
        super().respond(request)


def test_the_stage_resumes_after_a_kill_costs_nothing_again_and_writes_no_key(
        smoke_first_run, tmp_path, monkeypatch):
    work = tmp_path / "workspace"
    shutil.copytree(smoke_first_run.saved / "gpu", work, symlinks=True)
    monkeypatch.setenv("ARITHREPRO_LLM_KEY", SECRET)
    with Serving(work / "runs/expr/gpt-small-0/model.pt", Slow, key_env="ARITHREPRO_LLM_KEY") as srv:
        sh(["arithrepro", "compose-params", "-S", "profile=smoke", "-S", "llm=local",
            "-S", f"llm.at.local.base_url={srv.url}", "-S", "llm.limit=30", "-S", "llm.concurrency=1"], work)
        answers = work / "runs/expr/llm/local/answers.jsonl"
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        proc = subprocess.Popen(["dvc", "repro", "llm-expr@local"], cwd=work, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline and (not answers.is_file()
                                          or len(answers.read_text().splitlines()) < 11):
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        first_out = proc.communicate()[0].decode()
        kept = len(answers.read_text().splitlines()) - 1
        assert 10 <= kept < 60, first_out
        before = Slow.count[0]
        out = sh(["dvc", "repro", "llm-expr@local"], work)
        # every problem answered once in all: the second run asked only what the first had not
        # written (a line cut short by the kill is asked again)
        assert Slow.count[0] - before in range(60 - kept, 60 - kept + 2), out
        record = json.loads((work / "metrics/expr/llm/local.json").read_text())
        assert record["n"] == 60 and sum(record["kinds"].values()) == 60
        assert record["endpoint"] == {"base_url": srv.url, "model": "arithrepro"}
        again = Slow.count[0]
        out += sh(["dvc", "repro", "llm-expr@local"], work)
        assert Slow.count[0] == again, "a finished run was asked again"
        out += sh(["dvc", "repro", "render-figures-bench"], work)
    assert "## LLMs on expr's problems" in (work / "metrics/bench.md").read_text()
    leaked = [str(p.relative_to(work)) for p in work.rglob("*")
              if p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes()]
    assert leaked == [] and SECRET not in out + first_out


def test_without_the_llm_extra_the_stage_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)   # as if the package were not installed
    monkeypatch.setenv("ARITHREPRO_TEST_KEY", "k")
    endpoint = {"base_url": "http://127.0.0.1:9", "model": "m", "key_env": "ARITHREPRO_TEST_KEY"}
    with pytest.raises(ValueError, match=r"^llm: the openai package is missing; install the "
                                         r"llm extra \(pip install 'arithrepro\[llm\]'\)$"):
        llm.client_for(endpoint, 1, 0)
