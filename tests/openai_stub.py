"""A scripted OpenAI-compatible server on loopback: chat and raw completions, every request body and header kept,
answers chosen by a function of the body, and a vLLM-like 400 for the constraints it is told to refuse."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# What vLLM 0.32 answers (400) to a JSON schema its grammar backend cannot compile (seen on the real server).
VLLM_SCHEMA_REFUSAL = "The provided JSON schema contains features not supported by xgrammar."


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any,
              headers: dict[str, str] | None = None) -> None:
    """Answer ``handler``'s request with ``payload`` as JSON (and any extra ``headers``)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def serve_on_loopback(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """``handler`` served on a free 127.0.0.1 port from a daemon thread (the caller shuts it down)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass
class Stub:
    answer: Callable[[dict[str, Any]], str] = lambda body: "yes"
    refuse: Callable[[dict[str, Any]], bool] = lambda body: False
    fail: Callable[[dict[str, Any]], int | None] = lambda body: None  # an HTTP status to answer with instead
    seen: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""


@contextmanager
def openai_stub(stub: Stub) -> Iterator[Stub]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                stub.seen.append(body)
                stub.paths.append(self.path)
                stub.headers.append({k.lower(): v for k, v in self.headers.items()})
            raw = self.path.endswith("/completions") and "chat" not in self.path
            failure = stub.fail(body)
            if failure:
                status, payload = failure, {"error": {"message": "the server is overloaded", "type": "server_error"}}
            elif stub.refuse(body):
                status, payload = 400, {"error": {"message": VLLM_SCHEMA_REFUSAL, "type": "BadRequestError"}}
            else:
                text, n = stub.answer(body), body.get("n", 1)
                choice = ({"text": text, "logprobs": None} if raw
                          else {"message": {"role": "assistant", "content": text}, "logprobs": None})
                status, payload = 200, {
                    "id": "x", "object": "text_completion" if raw else "chat.completion", "created": 0,
                    "model": body["model"], "choices": [{"index": i, "finish_reason": "stop", **choice}
                                                        for i in range(n)],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}}
            send_json(self, status, payload)

        def log_message(self, *args: object) -> None:
            pass

    server = serve_on_loopback(Handler)
    stub.url = f"http://127.0.0.1:{server.server_port}/v1"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
