"""The vLLM engine's call pattern, with a stand-in for vLLM's ``LLM`` that records its calls (vLLM does not
install on CPU machines; the real engine is the gpu-marked test in test_openai_engine.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from veracity.models.engine import GenerationRequest
from veracity.models.vllm_engine import VLLMEngine


@dataclass
class FakeSampling:
    n: int
    temperature: float
    top_p: float
    max_tokens: int
    seed: int | None
    stop: list[str] | None
    logprobs: int | None
    structured_outputs: Any = None

    def __post_init__(self) -> None:  # what vLLM's own SamplingParams refuses
        if self.temperature == 0 and self.n > 1:
            raise ValueError("n must be 1 when using greedy sampling")


@dataclass
class RecordingLLM:
    """Answers each request with its own text and parameters, so a mix-up between requests shows."""

    calls: list[tuple[str, list[Any], list[FakeSampling]]] = field(default_factory=list)
    fail_on: str | None = None

    def _outputs(self, inputs: list[Any], params: list[FakeSampling]) -> list[SimpleNamespace]:
        if not isinstance(params, list) or len(params) != len(inputs):
            raise TypeError("one SamplingParams per request")
        if any(self.fail_on in str(x) for x in inputs if self.fail_on):
            raise ValueError("prompt too long")
        def text(x: Any, p: FakeSampling, k: int) -> str:
            return f"{x if isinstance(x, str) else x[-1]['content']}|t={p.temperature}|k={k}"

        def logprobs(p: FakeSampling) -> list[dict[int, Any]] | None:
            return None if p.logprobs is None else [{5: SimpleNamespace(logprob=-0.5)},
                                                    {6: SimpleNamespace(logprob=-1.0)}]

        return [SimpleNamespace(prompt_token_ids=[0] * len(str(x)), outputs=[
            SimpleNamespace(text=text(x, p, k), finish_reason="length", token_ids=[5, 6], logprobs=logprobs(p))
            for k in range(p.n)]) for x, p in zip(inputs, params, strict=True)]

    def chat(self, conversations: list[Any], params: list[FakeSampling], use_tqdm: bool = True) -> list[Any]:
        self.calls.append(("chat", conversations, params))
        return self._outputs(conversations, params)

    def generate(self, prompts: list[str], params: list[FakeSampling], use_tqdm: bool = True) -> list[Any]:
        self.calls.append(("generate", prompts, params))
        return self._outputs(prompts, params)


def _engine(folder: Path, llm: RecordingLLM) -> VLLMEngine:
    return VLLMEngine(str(folder), llm=llm, sampling_params=FakeSampling)


def test_one_call_for_a_batch_with_per_request_params_in_order(tiny_lm_dir: Path) -> None:
    llm = RecordingLLM()
    engine = _engine(tiny_lm_dir, llm)
    requests = [GenerationRequest.chat([{"role": "user", "content": f"q{i}"}], n=1 + i % 2, temperature=0.1 * i,
                                       max_new_tokens=10 + i, seed=i) for i in range(6)]
    results = engine.generate(requests)
    assert len(llm.calls) == 1, "one vLLM call for the whole batch"
    method, conversations, params = llm.calls[0]
    assert method == "chat" and conversations == [list(r.messages) for r in requests]
    assert [(p.n, p.temperature, p.max_tokens, p.seed) for p in params] == [
        (r.params.n, r.params.temperature, r.params.max_new_tokens, r.params.seed) for r in requests]
    for i, result in enumerate(results):  # each result is its own request's answer
        assert len(result.candidates) == 1 + i % 2
        assert result.candidates[0].text == f"q{i}|t={0.1 * i}|k=0"
        assert result.candidates[0].token_logprobs == [-0.5, -1.0] and result.candidates[0].num_tokens == 2


def test_chats_and_raw_prompts_keep_their_positions(tiny_lm_dir: Path) -> None:
    llm = RecordingLLM()
    engine = _engine(tiny_lm_dir, llm)
    requests = [GenerationRequest.chat([{"role": "user", "content": "c0"}]),
                GenerationRequest(prompt="p1"), GenerationRequest.chat([{"role": "user", "content": "c2"}]),
                GenerationRequest(prompt="p3")]
    results = engine.generate(requests)
    assert [(m, len(x)) for m, x, _ in llm.calls] == [("chat", 2), ("generate", 2)]
    assert [r.candidates[0].text.split("|")[0] for r in results] == ["c0", "p1", "c2", "p3"]


def test_a_failing_batch_is_retried_one_by_one(tiny_lm_dir: Path) -> None:
    llm = RecordingLLM(fail_on="TOO LONG")
    engine = _engine(tiny_lm_dir, llm)
    results = engine.generate([GenerationRequest(prompt="fine"), GenerationRequest(prompt="TOO LONG"),
                               GenerationRequest(prompt="also fine")])
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error == "ValueError: prompt too long"
    assert len(llm.calls) == 4, "the batch, then each request alone"


def test_model_id_carries_the_content_fingerprint(tiny_lm_dir: Path, tmp_path: Path) -> None:
    import shutil

    from veracity.models.fingerprint import model_fingerprint

    engine = _engine(tiny_lm_dir, RecordingLLM())
    assert engine.model_id == f"vllm:{engine.folder}#{model_fingerprint(tiny_lm_dir)}@auto"
    other = tmp_path / "retrained"
    shutil.copytree(tiny_lm_dir, other)
    weights = next(other.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # same size, other weights
    weights.write_bytes(bytes(data))
    assert _engine(other, RecordingLLM()).model_id.split("#")[1] != engine.model_id.split("#")[1]


def test_without_vllm_the_engine_says_how_to_get_it(tiny_lm_dir: Path) -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pip install 'veracity\[vllm\]'"):
            VLLMEngine(str(tiny_lm_dir))
    else:
        pytest.skip("vLLM is installed here")


def test_constraints_become_structured_outputs(tiny_lm_dir: Path) -> None:
    llm = RecordingLLM()
    engine = VLLMEngine(str(tiny_lm_dir), llm=llm, sampling_params=FakeSampling,
                        structured=lambda kind, spec: {"structured_outputs": (kind, spec)})
    schema = '{"properties": {"label": {"type": "string"}}, "type": "object"}'
    q = [{"role": "user", "content": "q"}]
    engine.generate([GenerationRequest.chat(q, json_schema=schema), GenerationRequest.chat(q),
                     GenerationRequest.chat(q, regex="[0-9]"), GenerationRequest.chat(q, choice=("yes", "no"))])
    (_, _, params), = llm.calls
    assert [p.structured_outputs for p in params] == [("json_schema", schema), None, ("regex", "[0-9]"),
                                                      ("choice", '["yes", "no"]')]


def test_greedy_requests_with_n_candidates_ask_vllm_once(tiny_lm_dir: Path) -> None:
    """vLLM refuses greedy n > 1: the engine asks for one answer and repeats it, as the transformers engine does;
    a sampled request keeps its n."""
    llm = RecordingLLM()
    engine = _engine(tiny_lm_dir, llm)
    q = [{"role": "user", "content": "q"}]
    greedy, sampled = engine.generate([GenerationRequest.chat(q, n=3),
                                       GenerationRequest.chat(q, n=3, temperature=0.7)])
    (_, _, params), = llm.calls
    assert [p.n for p in params] == [1, 3]
    assert greedy.ok and [c.text for c in greedy.candidates] == ["q|t=0.0|k=0"] * 3
    assert greedy.candidates[0] is not greedy.candidates[1]
    assert [c.text for c in sampled.candidates] == [f"q|t=0.7|k={k}" for k in range(3)]


def test_close_lets_go_of_the_llm(tiny_lm_dir: Path) -> None:
    """A Ray driver closes the engine it loaded for the run record before its actors load theirs: nothing of the
    engine may keep vLLM's LLM (and its GPU memory) alive."""
    import weakref

    llm = RecordingLLM()
    engine, alive = _engine(tiny_lm_dir, llm), weakref.ref(llm)
    engine.generate([GenerationRequest.chat([{"role": "user", "content": "q"}])])
    del llm
    engine.close()
    assert alive() is None


def test_deferred_loading_builds_the_llm_on_first_use(tiny_lm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray driver builds its pipeline under ``deferred_loading``: the engine is named (by content) without vLLM
    starting an ``LLM`` (which would take a GPU on the driver); it starts on the first generation, once. Elsewhere
    it starts at construction; after ``close`` the next generation starts it again."""
    import sys
    from types import ModuleType

    from veracity.models.loading import deferred_loading

    built: list[RecordingLLM] = []

    def llm(model: str, dtype: str) -> RecordingLLM:
        assert model == str(tiny_lm_dir.resolve()) or Path(model).resolve() == tiny_lm_dir.resolve()
        built.append(RecordingLLM())
        return built[-1]

    fake = ModuleType("vllm")
    fake.LLM, fake.SamplingParams = llm, FakeSampling
    monkeypatch.setitem(sys.modules, "vllm", fake)
    _fake_platform(monkeypatch, cpu=False)
    with deferred_loading():
        engine = VLLMEngine(str(tiny_lm_dir))
    assert built == [] and engine.model_id.startswith(f"vllm:{engine.folder}#")
    request = [GenerationRequest.chat([{"role": "user", "content": "q"}])]
    engine.generate(request)
    engine.generate(request)
    assert len(built) == 1 and len(built[0].calls) == 2
    engine.close()
    engine.generate(request)
    assert len(built) == 2
    VLLMEngine(str(tiny_lm_dir))
    assert len(built) == 3, "built at construction outside deferred_loading"


def _fake_platform(monkeypatch: pytest.MonkeyPatch, cpu: bool) -> None:
    """A stand-in ``vllm.platforms``: vLLM's current platform, a CPU or not."""
    import sys
    from types import ModuleType

    platforms = ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cpu=lambda: cpu)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)


def _fake_vllm(monkeypatch: pytest.MonkeyPatch, built: list[dict[str, Any]], cpu: bool = False) -> None:
    """A stand-in ``vllm`` package: ``LLM`` records its arguments, ``StructuredOutputsParams`` its fields; the
    platform a GPU unless ``cpu``."""
    import sys
    from types import ModuleType

    def llm(**kwargs: Any) -> RecordingLLM:
        built.append(kwargs)
        return RecordingLLM()

    fake, sampling = ModuleType("vllm"), ModuleType("vllm.sampling_params")
    fake.LLM, fake.SamplingParams = llm, FakeSampling
    sampling.StructuredOutputsParams = lambda **fields: fields
    fake.sampling_params = sampling
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)
    _fake_platform(monkeypatch, cpu)


@pytest.mark.parametrize("cpu", [True, False])
def test_on_vllms_cpu_platform_prefills_are_whole_unless_the_user_says(tiny_lm_dir: Path, cpu: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.32 rewinds a seeded request's generator after a chunked prefill, which a CPU generator refuses ("CPU
    Generator does not use offset": every seeded R2VC batch of 24 claims failed so on the real vLLM here, see
    tests/test_vllm_inprocess.py). On its CPU platform the LLM starts with whole prefills; the user's own
    ``enable_chunked_prefill`` wins; a GPU gets vLLM's default."""
    from veracity.models.vllm_server import server_flags

    built: list[dict[str, Any]] = []
    _fake_vllm(monkeypatch, built, cpu=cpu)
    VLLMEngine(str(tiny_lm_dir), dtype="float32", max_model_len=2048)
    VLLMEngine(str(tiny_lm_dir), dtype="float32", enable_chunked_prefill=True)
    assert [b.get("enable_chunked_prefill") for b in built] == [False if cpu else None, True]
    assert built[0]["max_model_len"] == 2048
    # the same arguments as the server's flags (models/vllm_server.py, bench/engines.py --vllm_args)
    assert server_flags({"enable_chunked_prefill": False, "enforce_eager": True, "max_num_seqs": 8}) == [
        "--no-enable-chunked-prefill", "--enforce-eager", "--max-num-seqs", "8"]


def test_a_schema_goes_to_vllm_as_the_transformers_engines_grammar(tiny_lm_dir: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.32 ignores a request's disable_any_whitespace (seen on the real vLLM: Ev²R's counts came back with
    newlines between keys and ran past their budget) and, made compact engine-wide, writes "," and ":" where the
    budgets and training targets have ", " and ": ": a schema goes as the transformers engine's own grammar. Built
    through make_engine, where --vllm_args adds the user's LLM arguments."""
    import xgrammar

    from veracity.models.decoding import grammar_accepts, json_schema_grammar
    from veracity.models.engine import EngineConfig
    from veracity.models.engine_factory import make_engine

    built: list[dict[str, Any]] = []
    _fake_vllm(monkeypatch, built)
    engine = make_engine(EngineConfig(engine="vllm", model=str(tiny_lm_dir), dtype="float32",
                                      vllm_args='{"max_model_len": 1024, "enforce_eager": true}'))
    assert built == [{"model": str(tiny_lm_dir.resolve()), "dtype": "float32", "max_model_len": 1024,
                      "enforce_eager": True}]
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                                          "b": {"type": "string", "maxLength": 3}},
                         "required": ["a", "b"], "additionalProperties": False})
    q = [{"role": "user", "content": "q"}]
    engine.generate([GenerationRequest.chat(q, json_schema=schema), GenerationRequest.chat(q, regex="[0-9]"),
                     GenerationRequest.chat(q, choice=("yes", "no"))])
    (_, _, params), = engine.llm.calls
    assert [p.structured_outputs for p in params] == [{"grammar": json_schema_grammar(xgrammar, schema)},
                                                      {"regex": "[0-9]"}, {"choice": ["yes", "no"]}]
    assert grammar_accepts("json_schema", schema, '{"a": 1, "b": "xy"}')
    assert not grammar_accepts("json_schema", schema, '{"a":1,"b":"xy"}')
    assert not grammar_accepts("json_schema", schema, '{"a": 1,\n "b": "xy"}')

@pytest.mark.parametrize("bad", ["{max_model_len: 1}", "[1024]"])
def test_vllm_args_must_be_a_json_object(bad: str) -> None:
    from veracity.models.engine import EngineConfig

    with pytest.raises(ValueError, match="vllm_args"):
        EngineConfig(engine="vllm", vllm_args=bad)


class _FunctionWrapper:
    __slots__ = ()


class _AnswersAnything:
    """Like llvmlite's ``ffi.lib``: any attribute is a function wrapper (``__dict__`` too), so ``vars()`` gives one."""

    __slots__ = ()

    def __getattr__(self, name: str) -> _FunctionWrapper:
        return _FunctionWrapper()


def test_the_llm_starts_with_a_module_vllms_scan_cannot_read(tiny_lm_dir: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.32's CPU worker reads vars(value).get("kernel") of every attribute of every loaded module at start-up;
    with llvmlite loaded (numba, which bm25s imports) that raised and `infer r2vc --engine vllm` could not start
    (seen here). Such a module is out of sys.modules while the LLM starts, and back after."""
    import sys
    from types import ModuleType

    def scanning_llm(**kwargs: Any) -> RecordingLLM:  # what vllm.triton_utils.dispatcher._rebind_kernels does
        for module in list(sys.modules.values()):
            for value in list(getattr(module, "__dict__", {}).values()):
                if hasattr(value, "__dict__"):
                    vars(value).get("kernel")
        return RecordingLLM()

    lib = ModuleType("fake_llvmlite_ffi")
    lib.lib = _AnswersAnything()
    monkeypatch.setitem(sys.modules, "fake_llvmlite_ffi", lib)
    with pytest.raises(AttributeError, match="'_FunctionWrapper' object has no attribute 'get'"):
        scanning_llm()
    _fake_vllm(monkeypatch, [])
    sys.modules["vllm"].LLM = scanning_llm
    engine = VLLMEngine(str(tiny_lm_dir))
    assert engine.generate([GenerationRequest.chat([{"role": "user", "content": "q"}])])[0].ok
    assert sys.modules["fake_llvmlite_ffi"] is lib, "put back"


def test_pytest_m_server_continues_in_vllms_environment(tmp_path: Path) -> None:
    """`.venv/bin/python -m pytest -m server` (the command of docs/engines.md) runs the server tests in .venv-vllm,
    with the same arguments: here a stand-in for its python records them."""
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the server tests run in this environment")
    seen = tmp_path / "argv"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$@" > {seen}\n')
    fake.chmod(0o755)
    tests = Path(__file__).parent
    run = subprocess.run([sys.executable, "-m", "pytest", "-m", "server", "-q", "-p", "no:cacheprovider",
                          str(tests / "test_vllm_inprocess.py")], cwd=tests.parent, capture_output=True, text=True,
                         env={**os.environ, "VERACITY_VLLM_PYTHON": str(fake)}, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert seen.read_text().split() == ["-m", "pytest", "-m", "server", "-q", "-p", "no:cacheprovider",
                                        str(tests / "test_vllm_inprocess.py")]
