"""The OpenAI-compatible engine against a real server on loopback (``transformers serve`` with a tiny model),
and against a scripted stub server for rate limits and retries."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from openai_stub import send_json, serve_on_loopback

from veracity.models.engine import EngineError, GenerationRequest
from veracity.models.openai_engine import OpenAIEngine

HELLO = [{"role": "user", "content": "hello"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """``transformers serve`` (not pinned to a model: requests name the folder), started on a free loopback port."""
    exe = shutil.which("transformers", path=str(Path(sys.executable).parent)) or shutil.which("transformers")
    port = _free_port()
    log = open(tmp_path_factory.mktemp("serve") / "serve.log", "w")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([exe, "serve", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/health", timeout=1).status == 200:
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("transformers serve did not come up in 90 s")
    yield f"{url}/v1", str(tiny_lm_dir)
    proc.terminate()
    proc.wait(timeout=20)
    log.close()


@pytest.mark.slow
def test_real_server_end_to_end(served) -> None:
    base_url, model = served
    engine = OpenAIEngine(model, base_url=base_url, send_generation_config=True)
    result = engine.generate([GenerationRequest.chat(HELLO, n=3, temperature=1.0, max_new_tokens=5, seed=11)])[0]
    assert result.ok and len(result.candidates) == 3 and result.prompt_tokens
    assert engine.n_supported is False, "transformers serve ignores n: detected, filled by separate requests"
    assert len({c.text for c in result.candidates}) > 1, "the extra requests use distinct seeds"
    assert all(c.token_logprobs is None and c.mean_logprob is None for c in result.candidates), "unavailable, not 0"
    replay = engine.generate([GenerationRequest.chat(HELLO, n=3, temperature=1.0, max_new_tokens=5, seed=11)])[0]
    assert [c.text for c in replay.candidates] == [c.text for c in result.candidates]
    greedy = engine.generate([GenerationRequest.chat(HELLO, max_new_tokens=4)] * 3)
    assert all(r.ok and r.candidates[0].finish_reason == "length" for r in greedy)
    assert len({r.candidates[0].text for r in greedy}) == 1


@pytest.mark.slow
def test_real_server_timeout_is_retried_then_recorded(served) -> None:
    base_url, model = served
    engine = OpenAIEngine(model, base_url=base_url, timeout=0.01, max_retries=1)
    result = engine.generate([GenerationRequest.chat(HELLO, max_new_tokens=300)])[0]
    assert not result.ok and result.error.startswith("server_error after 2 attempts: APITimeoutError")


@pytest.mark.slow
def test_real_server_error_is_retried_then_recorded(served) -> None:
    base_url, _ = served
    engine = OpenAIEngine("no-such-org/no-such-model", base_url=base_url, max_retries=2)
    result = engine.generate([GenerationRequest.chat(HELLO, max_new_tokens=4)])[0]
    assert not result.ok and result.error.startswith("server_error after 3 attempts: InternalServerError")


def test_unreachable_server_is_a_recorded_connection_error() -> None:
    engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{_free_port()}/v1", max_retries=1)
    assert "APIConnectionError" in engine.generate([GenerationRequest.chat(HELLO)])[0].error


# --- scripted stub server: exact control over status codes -------------------------------------------------

class Script:
    """Answers with ``statuses`` in turn (then 200); a status may come with headers: ``(429, {"Retry-After": "1"})``.
    Records each request body and the time it arrived."""

    def __init__(self, statuses: list[int | tuple[int, dict[str, str]]], delay: float = 0.0,
                 reject_response_format: bool = False):
        self.statuses, self.seen, self.delay = statuses, [], delay
        self.reject_response_format = reject_response_format
        self.arrived: list[float] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()


def _stub(script: Script):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with script.lock:
                script.seen.append(body)
                script.arrived.append(time.monotonic())
                script.in_flight += 1
                script.max_in_flight = max(script.max_in_flight, script.in_flight)
            time.sleep(script.delay)
            with script.lock:
                script.in_flight -= 1
            status = script.statuses.pop(0) if script.statuses else 200
            status, headers = status if isinstance(status, tuple) else (status, {})
            if script.reject_response_format and "response_format" in body:
                status = 400
            if status == 200:
                n = body.get("n", 1)
                payload = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                           "choices": [{"index": i, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": f"answer {i}"},
                                        "logprobs": {"content": [{"token": "a", "logprob": -0.5, "bytes": None,
                                                                  "top_logprobs": []}]}} for i in range(n)],
                           "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}}
            elif script.reject_response_format and "response_format" in body:
                payload = {"error": {"message": "Unrecognized request argument supplied: response_format",
                                     "type": "invalid_request_error"}}
            else:
                payload = {"error": {"message": f"status {status}", "type": "x"}}
            send_json(self, status, payload, headers)

        def log_message(self, *args: object) -> None:
            pass

    return serve_on_loopback(Handler)


@pytest.mark.parametrize(("statuses", "ok", "attempts"), [
    ([429, 503], True, 3),  # rate limit, then unavailable, then success
    ([500, 500, 500], False, 3),  # out of retries: recorded error
])
def test_retries_with_backoff(statuses: list[int], ok: bool, attempts: int) -> None:
    script = Script(list(statuses))
    server = _stub(script)
    try:
        engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{server.server_port}/v1", max_retries=2)
        result = engine.generate([GenerationRequest.chat(HELLO, n=2, temperature=1.0)])[0]
    finally:
        server.shutdown()
    assert len(script.seen) == attempts and result.ok is ok
    if ok:
        assert [c.text for c in result.candidates] == ["answer 0", "answer 1"] and engine.n_supported
        assert result.candidates[0].token_logprobs == [-0.5]


def _run(script: Script, max_retries: int = 2, **request: object):
    server = _stub(script)
    try:
        engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{server.server_port}/v1", max_retries=max_retries)
        return engine.generate([GenerationRequest.chat(HELLO, **request)])[0]
    finally:
        server.shutdown()


def test_retry_after_is_honoured() -> None:
    script = Script([(429, {"Retry-After": "1"})])
    result = _run(script)
    assert result.ok and len(script.seen) == 2
    waited = script.arrived[1] - script.arrived[0]
    assert 0.95 <= waited < 2.0, f"waited {waited:.2f} s for Retry-After: 1"


def test_backoff_grows_from_half_a_second() -> None:
    script = Script([503, 503])
    assert _run(script).ok and len(script.seen) == 3
    first, second = script.arrived[1] - script.arrived[0], script.arrived[2] - script.arrived[1]
    assert 0.37 <= first <= 0.9 and 0.75 <= second <= 1.5, (first, second)  # 0.5 s, then 1 s, minus up to 25 %


@pytest.mark.parametrize("status", [408, 409])
def test_request_timeout_and_conflict_are_retried(status: int) -> None:
    script = Script([status])
    assert _run(script).ok and len(script.seen) == 2


def test_other_client_errors_are_not_retried() -> None:
    script = Script([422])
    result = _run(script)
    assert len(script.seen) == 1 and result.error.startswith("http_422: ")
    script = Script([400])
    result = _run(script)
    assert len(script.seen) == 1 and result.error.startswith("bad_request: ")


def test_out_of_retries_on_429_is_a_recorded_error() -> None:
    script = Script([(429, {"Retry-After": "0.1"})] * 3)
    result = _run(script, max_retries=2)
    assert len(script.seen) == 3 and result.error.startswith("server_error after 3 attempts: RateLimitError")


@pytest.mark.parametrize(("status", "message"), [(401, "authentication failed"), (404, "not found")])
def test_auth_and_missing_model_are_clear_errors(status: int, message: str) -> None:
    server = _stub(Script([status]))
    try:
        engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{server.server_port}/v1", max_retries=2)
        with pytest.raises(EngineError, match=message):
            engine.generate([GenerationRequest.chat(HELLO)])
    finally:
        server.shutdown()


def test_concurrency_is_bounded() -> None:
    script = Script([], delay=0.1)
    server = _stub(script)
    try:
        engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{server.server_port}/v1", concurrency=3)
        results = engine.generate([GenerationRequest.chat([{"role": "user", "content": str(i)}]) for i in range(9)])
    finally:
        server.shutdown()
    assert all(r.ok for r in results) and len(script.seen) == 9
    assert script.max_in_flight == 3, "three requests in flight at once, never more"
    assert [r.candidates[0].text for r in results] == ["answer 0"] * 9


@pytest.mark.gpu
def test_vllm_engine_generates() -> None:
    pytest.importorskip("vllm")
    from veracity.models.vllm_engine import VLLMEngine

    engine = VLLMEngine("real")
    result = engine.generate([GenerationRequest.chat(HELLO, n=2, temperature=0.7, max_new_tokens=8)])[0]
    assert len(result.candidates) == 2 and result.candidates[0].token_logprobs


SCHEMA = json.dumps({"type": "object", "properties": {"label": {"enum": ["SUPPORTS", "REFUTES"]}},
                     "required": ["label"]})


def test_json_schema_goes_as_response_format_where_the_server_accepts_it() -> None:
    script = Script([])
    server = _stub(script)
    try:
        engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{server.server_port}/v1")
        result = engine.generate([GenerationRequest.chat(HELLO, json_schema=SCHEMA)])[0]
        plain = engine.generate([GenerationRequest.chat(HELLO)])[0]
    finally:
        server.shutdown()
    assert result.ok and plain.ok and engine.json_schema_supported is True
    assert script.seen[0]["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": json.loads(SCHEMA), "strict": True}}
    assert "response_format" not in script.seen[1], "no schema, no response_format"


def test_a_server_that_rejects_response_format_is_detected_once() -> None:
    script = Script([], reject_response_format=True)
    server = _stub(script)
    try:
        engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{server.server_port}/v1", concurrency=1)
        first = engine.generate([GenerationRequest.chat(HELLO, json_schema=SCHEMA)])[0]
        later = engine.generate([GenerationRequest.chat(HELLO, json_schema=SCHEMA)] * 2)
    finally:
        server.shutdown()
    assert first.ok and all(r.ok for r in later) and engine.json_schema_supported is False
    assert ["response_format" in body for body in script.seen] == [True, False, False, False], \
        "rejected once (a 400, not retried), then asked without it"


def _one_request(engine_kwargs: dict, request: GenerationRequest) -> tuple[OpenAIEngine, dict]:
    script = Script([])
    server = _stub(script)
    try:
        engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{server.server_port}/v1", **engine_kwargs)
        assert engine.generate([request])[0].ok
    finally:
        server.shutdown()
    (body,) = script.seen
    return engine, body


@pytest.mark.parametrize(("server", "request_kwargs", "field", "value", "constrained"), [
    ("vllm", {"regex": "[0-9]"}, "structured_outputs", {"regex": "[0-9]"}, True),
    ("vllm", {"choice": ("yes", "no")}, "structured_outputs", {"choice": ["yes", "no"]}, True),
    ("llamacpp", {"choice": ("yes", "no")}, "grammar", 'root ::= "yes" | "no"', True),
    ("ollama", {"json_schema": SCHEMA}, "response_format", {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": json.loads(SCHEMA), "strict": True}}, True),
    ("llamacpp", {"json_schema": SCHEMA}, "response_format", {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": json.loads(SCHEMA), "strict": True}}, True),
    ("ollama", {"regex": "[0-9]"}, "structured_outputs", None, False),  # Ollama has no regex: sent as is, unenforced
])
def test_constraints_reach_each_server_in_its_own_field(server: str, request_kwargs: dict, field: str, value: object,
                                                        constrained: bool) -> None:
    kind = next(iter(request_kwargs))
    engine, body = _one_request({"server": server}, GenerationRequest.chat(HELLO, **request_kwargs))
    assert body.get(field) == value
    assert engine.decoding([kind])["constrained"] is constrained


def test_a_vllm_server_samples_without_the_models_generation_config_processors() -> None:
    """vLLM's server fills each sampling field a request leaves out from the model's generation_config.json (a
    repetition penalty, a top-k): sent as neutral, so served answers sample like the in-process ones."""
    _, body = _one_request({"server": "vllm"}, GenerationRequest.chat(HELLO, n=2, temperature=0.7, seed=3))
    assert {k: body[k] for k in ("top_k", "min_p", "repetition_penalty", "presence_penalty",
                                 "frequency_penalty")} == {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
                                                           "presence_penalty": 0.0, "frequency_penalty": 0.0}
    _, body = _one_request({"server": "ollama"}, GenerationRequest.chat(HELLO))
    assert "repetition_penalty" not in body and "top_k" not in body


def test_a_server_not_known_to_enforce_is_reported_unconstrained() -> None:
    """transformers serve answers 200 and ignores response_format: accepting the field proves nothing."""
    for server in ("unknown", "transformers"):
        engine, body = _one_request({"server": server}, GenerationRequest.chat(HELLO, json_schema=SCHEMA))
        assert "response_format" in body and engine.json_schema_supported is True
        assert engine.decoding(["json_schema"]) == {"constrained": False, "server": server,
                                                    "logprob_definition": None}
    engine, _ = _one_request({"server": "vllm"}, GenerationRequest.chat(HELLO, json_schema=SCHEMA))
    assert engine.decoding(["json_schema"])["constrained"] is True
    assert engine.decoding(["json_schema"])["logprob_definition"] is not None
    assert engine.decoding([])["constrained"] is False  # unconstrained requests


def test_a_rejected_schema_is_reported_unconstrained() -> None:
    script = Script([], reject_response_format=True)
    server = _stub(script)
    try:
        engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{server.server_port}/v1", server="ollama")
        engine.generate([GenerationRequest.chat(HELLO, json_schema=SCHEMA)])
    finally:
        server.shutdown()
    assert engine.decoding(["json_schema"])["constrained"] is False  # vLLM's own 400: tests/test_served_path.py


def test_cache_key_tells_greedy_generation_config_from_none() -> None:
    """send_generation_config decides whether transformers serve samples: cached answers of one must not replay
    as the other's (issue 24 item 12)."""
    from veracity.models.cache import request_key

    request = GenerationRequest.chat(HELLO, n=2, temperature=1.0)
    plain = OpenAIEngine("m", base_url="http://127.0.0.1:9/v1")
    sampled = OpenAIEngine("m", base_url="http://127.0.0.1:9/v1", send_generation_config=True)
    assert request_key(plain, request) != request_key(sampled, request)
    assert plain.model_id == "openai:http://127.0.0.1:9/v1#m"  # unchanged: existing caches still replay
    with pytest.raises(ValueError, match="server kind"):
        OpenAIEngine("m", server="nonsense")
