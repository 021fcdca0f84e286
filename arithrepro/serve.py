"""A trained expr model behind the OpenAI chat completions API (`arithrepro serve`): what the
llm-expr stage's end-to-end test talks to on loopback, and a way to put the project's models
next to hosted ones through the same client.

POST /v1/chat/completions takes the last user message as a problem written up to its `=`, decodes
the answer greedily, and replies in the structured output the llm stage asks for,
`{"answer": <integer>}`; a decoded answer that is not an integer is sent as it is (the client
counts it malformed). GET /v1/models lists the one model. With a key (the environment variable
`key_env` names), a request without `Authorization: Bearer <key>` is refused (401).
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Answerer:
    """Greedy answers of one trained expr model, one problem at a time (a lock: the model's
    decoding state is not shared between threads)."""

    def __init__(self, net, max_new: int):
        self.net, self.max_new, self.lock = net.eval(), max_new, threading.Lock()

    def __call__(self, problem: str) -> str:
        import torch

        from arithrepro.decoding import greedy_decode
        from arithrepro.tasks.expr import PAD, STOP, VOCAB, encode

        prompt = encode([problem], [""], len(problem) + 3)[0][:-1]   # <start> problem =
        tokens = torch.from_numpy(prompt.astype("int64")).unsqueeze(0)
        with self.lock:
            out = greedy_decode(self.net, tokens, torch.tensor([tokens.size(1)]), self.max_new, STOP)
        return "".join(VOCAB[t] for t in out[0].tolist() if t not in (STOP, PAD))


class Handler(BaseHTTPRequestHandler):
    answerer: Answerer
    model_name = "arithrepro"
    key: str | None = None

    def log_message(self, *args) -> None:   # quiet: a stage's log is the client's
        pass

    def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        if self.key is None or self.headers.get("Authorization") == f"Bearer {self.key}":
            return True
        self._send(401, {"error": {"message": "invalid key", "type": "invalid_request_error"}})
        return False

    def do_GET(self) -> None:
        if not self._authorized():
            return
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": self.model_name, "object": "model",
                                                          "owned_by": "arithrepro"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        if not self._authorized():
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        length = int(self.headers.get("Content-Length", 0))
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "the body is not JSON"}})
            return
        self.respond(request)

    def respond(self, request: dict) -> None:
        """Answer one chat completion request."""
        users = [m for m in request.get("messages", []) if m.get("role") == "user"]
        text = str(users[-1].get("content", "")) if users else ""
        self._send(200, self.completion(request, content_for(self.answerer, text)))

    def completion(self, request: dict, content: str, refusal: str | None = None) -> dict:
        return {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion",
                "created": int(time.time()), "model": request.get("model", self.model_name),
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": content,
                                         "refusal": refusal}}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}


def content_for(answerer: Answerer, text: str) -> str:
    """The message content for a user message: the structured answer, or what was decoded."""
    problem = text.strip().removesuffix("=")
    try:
        answer = answerer(problem)
    except ValueError as err:   # a character outside the expr vocabulary
        return f"cannot read the problem: {err}"
    try:
        return json.dumps({"answer": int(answer)})
    except ValueError:
        return answer


def server(model_path, host: str = "127.0.0.1", port: int = 0, key_env: str | None = None,
           handler: type[Handler] = Handler, max_new: int = 8) -> ThreadingHTTPServer:
    """The server (not yet serving: call serve_forever) for the saved model at `model_path`."""
    from arithrepro.models.registry import load_model

    from arithrepro.tasks.expr import VOCAB

    net, saved = load_model(model_path)
    if saved.get("form", "tokens") != "tokens" or saved["dims"].get("vocab_size") != len(VOCAB):
        raise ValueError(f"{model_path}: not a model trained on expr (its dims: {saved['dims']})")
    key = None
    if key_env:
        key = os.environ.get(key_env)
        if not key:
            raise ValueError(f"serve: the environment variable {key_env} (the key) is not set")
    bound = type("Bound", (handler,), {"answerer": Answerer(net, max_new), "key": key,
                                       "model_name": f"arithrepro-{saved['model']}"})
    return ThreadingHTTPServer((host, port), bound)
