"""``OpenAIEngine --server vllm`` against vLLM's real OpenAI-compatible server on loopback, started by a fixture on a
free port and stopped by its pid (``-m server``: .venv-vllm; issue 45)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from vllm_real import SERVED_NAME as NAME
from vllm_real import need_vllm, pipeline_formats

from veracity.models.engine import LOGPROB_DEFINITION, GenerationRequest
from veracity.models.openai_engine import OpenAIEngine
from veracity.models.vllm_server import free_port

pytestmark = pytest.mark.server
need_vllm()

HELLO = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def server(vllm_server: str) -> str:
    return vllm_server  # one server for the session (tests/conftest.py), shared with tests/test_vllm_r2vc.py


@pytest.fixture(scope="module")
def engine(server: str) -> OpenAIEngine:
    return OpenAIEngine(NAME, base_url=server, server="vllm", max_retries=1, concurrency=2, timeout=120)


def test_n_logprobs_seeds_and_greedy(engine: OpenAIEngine) -> None:
    ask = GenerationRequest.chat(HELLO, n=3, temperature=1.0, max_new_tokens=12, seed=5)
    first, again = engine.generate([ask, ask])
    assert first.ok and len(first.candidates) == 3 and engine.n_supported is True
    assert [c.text for c in again.candidates] == [c.text for c in first.candidates], "same seed, same samples"
    assert all(c.token_logprobs and len(c.token_logprobs) == c.num_tokens for c in first.candidates)
    greedy = engine.generate([GenerationRequest.chat(HELLO, n=3, max_new_tokens=10)])[0]
    assert greedy.ok and len({c.text for c in greedy.candidates}) == 1 and len(greedy.candidates) == 3


@pytest.mark.parametrize("k", range(5))
def test_every_pipelines_format_parses(engine: OpenAIEngine, k: int) -> None:
    name, messages, constraint, parse = pipeline_formats()[k]
    result = engine.generate([GenerationRequest.chat(messages, n=3, temperature=1.0, seed=3, **constraint)])[0]
    texts = [c.text for c in result.candidates]
    assert result.ok and len(texts) == 3 and all(parse(t) is not None for t in texts), (name, texts)
    kind = next(key for key in ("json_schema", "regex", "choice") if key in constraint)
    assert engine.decoding([kind]) == {"constrained": True, "server": "vllm",
                                       "logprob_definition": LOGPROB_DEFINITION}


def test_a_raw_prompt_with_a_schema(engine: OpenAIEngine) -> None:
    schema = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 12}},
              "required": ["colour"], "additionalProperties": False}
    result = engine.generate([GenerationRequest(prompt="A colour as JSON:", params=GenerationRequest.chat(
        HELLO, json_schema=json.dumps(schema), max_new_tokens=60, n=2, temperature=1.0).params)])[0]
    assert result.ok and all(set(json.loads(c.text)) == {"colour"} for c in result.candidates), result


def test_a_constraint_the_server_refuses_leaves_the_run_unconstrained(server: str, tmp_path: Path) -> None:
    """vLLM answers 400 to a regex with a NUL character ("structured_outputs.regex must not contain a NUL
    character"): the request goes again without it, answers, and the run record ends constrained: false. (A schema
    is sent as the transformers engine's grammar, which vLLM compiles as it is.)"""
    from veracity.infer import generate

    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "messages": HELLO}) + "\n")
    generate.main(["--input", str(tmp_path / "in.jsonl"), "--output_dir", str(tmp_path / "out"),
                   "--engine", "openai", "--model", NAME, "--base_url", server, "--server", "vllm",
                   "--regex", "[a-z]+\x00", "--max_new_tokens", "8",
                   "--progress", "false", "--cache", str(tmp_path / "c.sqlite")])
    record = yaml.safe_load((tmp_path / "out" / "run_config.yaml").read_text())
    assert record["decoding"]["constrained"] is False
    (line,) = (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    assert json.loads(line)["status"] == "ok", "answered without the constraint"


@contextmanager
def _relay(port: int, target: int, after: float) -> Iterator[None]:
    """Loopback ``port`` forwarded to ``target`` from ``after`` seconds on; before that nothing listens there
    (connection refused): a server that is briefly down. Stopped on exit."""
    stop = threading.Event()
    listener = socket.socket()

    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            b.close()

    def serve() -> None:
        if stop.wait(after):
            return
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)


def test_retries_while_the_server_is_briefly_down(server: str) -> None:
    """Connection refused for 3 s, then vLLM's server answers: the SDK's retries (0.5 s doubling, jitter) carry the
    request over; a server that stays down is an error result after max_retries + 1 attempts, bounded in time."""
    target, port = urlparse(server).port, free_port()
    ask = [GenerationRequest.chat(HELLO, max_new_tokens=8)]
    engine = OpenAIEngine(NAME, base_url=f"http://127.0.0.1:{port}/v1", server="vllm", max_retries=6, timeout=60)
    with _relay(port, target, after=3.0):
        start = time.monotonic()
        (result,) = engine.generate(ask)
        waited = time.monotonic() - start
    assert result.ok and result.candidates[0].text and result.candidates[0].token_logprobs, result
    assert 3.0 <= waited < 60, waited
    down = OpenAIEngine(NAME, base_url=f"http://127.0.0.1:{free_port()}/v1", server="vllm", max_retries=2)
    start = time.monotonic()
    (failed,) = down.generate(ask)
    assert failed.error and failed.error.startswith("server_error after 3 attempts") and "Connection" in failed.error
    assert time.monotonic() - start < 10
