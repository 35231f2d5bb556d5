"""``OpenAIEngine --server vllm`` against vLLM's real OpenAI-compatible server on loopback, started by a fixture on a
free port and stopped by its pid (``-m server``: .venv-vllm; issue 45)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from vllm_real import LLM_KWARGS, VLLM_ENV, embedded_folder, need_vllm, pipeline_formats

from veracity.models.engine import LOGPROB_DEFINITION, GenerationRequest
from veracity.models.openai_engine import OpenAIEngine

pytestmark = pytest.mark.server
need_vllm()

NAME = "smollm2"
HELLO = [{"role": "user", "content": "Name a colour."}]
START_SECONDS = 300  # ≈ 1 min alone on this CPU; more while other work shares its two cores


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(embedded_folder()),
               "--served-model-name", NAME, "--dtype", "float32", "--max-model-len", str(LLM_KWARGS["max_model_len"]),
               "--enforce-eager", "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, **VLLM_ENV}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")  # the server runs its engine core in its own process
    with open(log_path, "w") as log:
        # its own process group: the server's engine-core children are stopped with it
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + START_SECONDS
        while True:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"vLLM's server did not come up: {log_path.read_text()[-3000:]}")
            time.sleep(1)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this fixture started
            proc.wait(timeout=10)


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


def test_a_schema_the_server_refuses_leaves_the_run_unconstrained(server: str, tmp_path: Path) -> None:
    from veracity.infer import generate

    # uniqueItems: "features not supported by xgrammar" (vLLM answers 400)
    schema = {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"},
                                                       "uniqueItems": True, "maxItems": 2}},
              "required": ["ids"], "additionalProperties": False}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "messages": HELLO}) + "\n")
    generate.main(["--input", str(tmp_path / "in.jsonl"), "--output_dir", str(tmp_path / "out"),
                   "--engine", "openai", "--model", NAME, "--base_url", server, "--server", "vllm",
                   "--json_schema", str(tmp_path / "s.json"), "--max_new_tokens", "8",
                   "--progress", "false", "--cache", str(tmp_path / "c.sqlite")])
    record = yaml.safe_load((tmp_path / "out" / "run_config.yaml").read_text())
    assert record["decoding"]["constrained"] is False
    (line,) = (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    assert json.loads(line)["status"] == "ok", "answered without the schema"
