"""Engines on tiny offline models: the transformers engine, the response cache, JSON parsing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from veracity.infer.parsing import extract_json_object, parse_json_answer
from veracity.models.cache import CachedEngine, ResponseCache
from veracity.models.engine import EngineConfig, GenerationRequest, SamplingParams
from veracity.models.engine_factory import make_engine
from veracity.models.hf_engine import TransformersEngine

HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def engine(tiny_lm_dir: Path) -> TransformersEngine:
    return TransformersEngine(str(tiny_lm_dir), batch_size=4)


def test_greedy_batched_equals_one_at_a_time(engine: TransformersEngine) -> None:
    prompts = ["hi", "a considerably longer prompt that forces left padding", "x"]
    requests = [GenerationRequest.chat([{"role": "user", "content": p}], max_new_tokens=6) for p in prompts]
    batched = engine.generate(requests)
    single = [engine.generate([r])[0] for r in requests]
    assert [r.candidates[0].text for r in batched] == [r.candidates[0].text for r in single]
    for b, s in zip(batched, single, strict=True):
        assert b.candidates[0].token_logprobs == pytest.approx(s.candidates[0].token_logprobs, abs=1e-4)


def test_token_logprobs_equal_a_teacher_forced_forward_pass(engine: TransformersEngine,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    seen = {}
    generate = engine.model.generate

    def recording(**kwargs):
        out = generate(**kwargs)
        seen["sequences"] = out.sequences
        return out

    monkeypatch.setattr(engine.model, "generate", recording)
    request = GenerationRequest.chat(HELLO, n=2, temperature=1.0, max_new_tokens=5, seed=3)
    candidates = engine.generate([request])[0].candidates
    prompt_length = len(engine.encode(request))
    for candidate, sequence in zip(candidates, seen["sequences"], strict=True):
        with torch.no_grad():
            logits = engine.model(sequence[None]).logits[0].float().log_softmax(-1)
        expected = [logits[prompt_length + k - 1, sequence[prompt_length + k]].item()
                    for k in range(candidate.num_tokens)]
        assert candidate.token_logprobs == pytest.approx(expected, abs=1e-4)


def test_n_candidates_logprobs_and_finish_reason(engine: TransformersEngine) -> None:
    result = engine.generate([GenerationRequest.chat(HELLO, n=4, temperature=1.0, max_new_tokens=5, seed=7)])[0]
    assert len(result.candidates) == 4 and result.prompt_tokens and result.prompt_tokens > 5
    assert len({c.text for c in result.candidates}) > 1, "sampled candidates should differ"
    for c in result.candidates:
        assert c.finish_reason in ("stop", "length")
        assert len(c.token_logprobs) == c.num_tokens and all(lp <= 0 for lp in c.token_logprobs)
        assert c.mean_logprob == pytest.approx(sum(c.token_logprobs) / c.num_tokens)
    again = engine.generate([GenerationRequest.chat(HELLO, n=4, temperature=1.0, max_new_tokens=5, seed=7)])[0]
    assert [c.text for c in again.candidates] == [c.text for c in result.candidates], "same seed, same samples"
    greedy = engine.generate([GenerationRequest.chat(HELLO, n=3, max_new_tokens=5)])[0]
    assert len(greedy.candidates) == 3 and len({c.text for c in greedy.candidates}) == 1
    assert greedy.candidates[0].finish_reason == "length"


def test_batch_rows_end_at_their_own_eos(tiny_lm_dir: Path) -> None:
    """A row that meets its EOS early ends there (EOS scored, "stop"), while the row beside it goes on exactly as
    it would alone: the finished row's padding is not read as the other's end, nor the other's tokens as its own."""
    import torch

    engine = TransformersEngine(str(tiny_lm_dir), batch_size=4)  # changed below: not the shared one
    with torch.no_grad():  # weights x5: the random model's greedy output then depends on its prompt
        for name, weight in engine.model.named_parameters():
            if "norm" not in name:
                weight.mul_(5)
    requests = [GenerationRequest.chat([{"role": "user", "content": p}], max_new_tokens=8) for p in ("a", "bb")]
    free = engine.model.generate(torch.tensor([engine.encode(requests[0])]), max_new_tokens=8, do_sample=False,
                                 pad_token_id=engine.tokenizer.pad_token_id)[0, len(engine.encode(requests[0])):]
    tokens = free.tolist()
    # the first token that row "a" produces for the first time at step 2 or later becomes the EOS
    step = next(k for k in range(2, len(tokens)) if tokens[k] not in tokens[:k] and tokens[k] not in engine.eos_ids)
    eos = tokens[step]
    engine.model.generation_config.eos_token_id = eos
    engine.eos_ids = {eos}
    alone = [engine.generate([r])[0].candidates[0] for r in requests]
    batched = [r.candidates[0] for r in engine.generate(requests)]
    assert alone[0].num_tokens == step + 1 and alone[0].finish_reason == "stop"
    assert alone[0].text == engine.tokenizer.decode(tokens[:step], skip_special_tokens=True)
    assert alone[1].num_tokens != alone[0].num_tokens, "the rows must end at different steps for the test to bite"
    for b, a in zip(batched, alone, strict=True):
        assert (b.text, b.num_tokens, b.finish_reason) == (a.text, a.num_tokens, a.finish_reason)
        assert b.token_logprobs == pytest.approx(a.token_logprobs, abs=1e-4)


@pytest.mark.slow
def test_stop_string_ends_the_text_on_the_embedded_model(embedded_cache: Path, monkeypatch) -> None:
    monkeypatch.setenv("VERACITY_CACHE", str(embedded_cache))
    smol = TransformersEngine("embedded")
    ask = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    free = smol.generate([GenerationRequest.chat(ask, max_new_tokens=20)])[0].candidates[0].text
    stopped = smol.generate([GenerationRequest.chat(ask, max_new_tokens=20, stop=("Paris",))])[0].candidates[0]
    assert "Paris" in free
    assert stopped.text == free[: free.find("Paris")] and stopped.finish_reason == "stop"


def test_oversized_prompt_is_a_recorded_error_not_a_crash(engine: TransformersEngine) -> None:
    long = [{"role": "user", "content": "y" * 1100}]  # byte tokenizer: 1100+ tokens > 1024 context
    results = engine.generate([GenerationRequest.chat(long, max_new_tokens=4), GenerationRequest.chat(HELLO,
                                                                                                       max_new_tokens=4)])
    assert results[0].error.startswith("context_overflow") and not results[0].candidates
    assert results[1].ok and results[1].candidates


def test_raw_prompt_and_bad_requests(engine: TransformersEngine) -> None:
    assert engine.generate([GenerationRequest(prompt="abc", params=SamplingParams(max_new_tokens=3))])[0].ok
    with pytest.raises(ValueError, match="either messages or a prompt"):
        GenerationRequest()
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)


def test_lora_adapter_is_applied(tiny_lm_dir: Path, tmp_path: Path, engine: TransformersEngine) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_lm_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(0.5)
    model.save_pretrained(tmp_path / "adapter")
    adapted = TransformersEngine(str(tiny_lm_dir), adapter=str(tmp_path / "adapter"))
    request = [GenerationRequest.chat(HELLO, max_new_tokens=6)]
    assert adapted.model_id != engine.model_id
    base_lp = engine.generate(request)[0].candidates[0].token_logprobs
    assert adapted.generate(request)[0].candidates[0].token_logprobs != pytest.approx(base_lp)


def test_deferred_loading_names_the_model_and_loads_it_on_first_use(tiny_lm_dir: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``deferred_loading`` (a Ray driver) the engine is named — the same id as a loaded one — without reading
    its weights; they load on the first generation, once. Elsewhere they load at construction (a model that cannot
    load fails the run there, not item by item)."""
    from veracity.models import hf_engine
    from veracity.models.loading import deferred_loading

    loads: list[str] = []
    load = hf_engine.AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(hf_engine.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: loads.append(str(a[0])) or load(*a, **k))
    with deferred_loading():
        deferred = TransformersEngine(str(tiny_lm_dir))
    assert loads == []
    eager = TransformersEngine(str(tiny_lm_dir))
    assert len(loads) == 1 and deferred.model_id == eager.model_id and deferred.context == eager.context
    request = [GenerationRequest.chat(HELLO, max_new_tokens=4)]
    assert deferred.generate(request)[0].candidates[0].text == eager.generate(request)[0].candidates[0].text
    deferred.generate(request)
    assert len(loads) == 2, "loaded once, on first use"
    deferred.close()
    assert deferred.generate(request)[0].ok and len(loads) == 3, "a closed engine loads again when used"


class CountingEngine:
    """Wraps an engine and counts the requests that reach it."""

    def __init__(self, inner: TransformersEngine):
        self.inner, self.calls, self.kind = inner, 0, inner.kind

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def generate(self, requests):
        self.calls += len(requests)
        return self.inner.generate(requests)


def test_cache_replays_without_calling_the_model(engine: TransformersEngine, tmp_path: Path) -> None:
    counting = CountingEngine(engine)
    cached = CachedEngine(counting, ResponseCache(tmp_path / "c.sqlite"))  # type: ignore[arg-type]
    requests = [GenerationRequest.chat(HELLO, max_new_tokens=5), GenerationRequest.chat(HELLO, max_new_tokens=6)]
    cold = cached.generate(requests)
    assert counting.calls == 2 and not any(r.cached for r in cold)
    warm = cached.generate(requests + [GenerationRequest.chat(HELLO, max_new_tokens=7)])
    assert counting.calls == 3, "only the new request reaches the model"
    assert [r.cached for r in warm] == [True, True, False]
    assert [r.to_dict() for r in warm[:2]] == [r.to_dict() for r in cold]
    # a different seed is a different request
    cached.generate([GenerationRequest.chat(HELLO, max_new_tokens=5, seed=1)])
    assert counting.calls == 4


def test_cache_does_not_store_errors(engine: TransformersEngine, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    cached = CachedEngine(engine, cache)
    cached.generate([GenerationRequest.chat([{"role": "user", "content": "y" * 1100}], max_new_tokens=4)])
    assert len(cache) == 0


def test_cache_is_safe_under_concurrent_writers(tmp_path: Path) -> None:
    cache_path = tmp_path / "c.sqlite"
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            cache = ResponseCache(cache_path)
            for i in range(50):
                cache.put_many({f"{k}-{i}": {"candidates": [], "prompt_tokens": i, "error": None}})
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(ResponseCache(cache_path)) == 200


def test_make_engine_with_cache(tiny_lm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache wraps the engine the config describes (its model, batch size and dtype) in the file it names; a
    second identical request is served from that file, the model not asked again."""
    import torch

    from veracity.models.fingerprint import model_fingerprint

    config = EngineConfig(model=str(tiny_lm_dir), cache=str(tmp_path / "c.sqlite"), batch_size=3, dtype="float32")
    engine = make_engine(config)
    assert isinstance(engine, CachedEngine) and isinstance(engine.engine, TransformersEngine)
    inner = engine.engine
    assert (inner.folder, inner.batch_size, inner.dtype) == (tiny_lm_dir.resolve(), 3, torch.float32)
    assert engine.identity == f"transformers:{tiny_lm_dir.resolve()}#{model_fingerprint(tiny_lm_dir)}@float32"
    assert engine.cache.path == tmp_path / "c.sqlite"
    asked: list[int] = []
    generate = inner.generate
    monkeypatch.setattr(inner, "generate", lambda requests: asked.append(len(requests)) or generate(requests))
    request = GenerationRequest.chat([{"role": "user", "content": "Is the sky blue?"}], max_new_tokens=4)
    first, second = engine.generate([request])[0], engine.generate([request])[0]
    assert asked == [1] and len(engine.cache) == 1
    assert (first.cached, second.cached) == (False, True)
    assert [c.text for c in second.candidates] == [c.text for c in first.candidates]
    with pytest.raises(ValueError, match="unknown engine"):
        make_engine(EngineConfig(engine="telepathy"))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"label": "SUPPORTS"}', {"label": "SUPPORTS"}),
        ('Sure! Here it is:\n```json\n{"label": "REFUTES", "ids": [1, 2]}\n```\nHope it helps.',
         {"label": "REFUTES", "ids": [1, 2]}),
        ('<think>maybe {"label": "SUPPORTS"}?</think>\n{"label": "NOT ENOUGH INFO"} trailing',
         {"label": "NOT ENOUGH INFO"}),
        ('The answer {is} here: {"a": {"b": 1}} and {"c": 2}', {"a": {"b": 1}}),
    ],
)
def test_json_extraction(text: str, value: dict) -> None:
    result = extract_json_object(text)
    assert result.ok and result.value == value


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("no json at all", "no_json_object"),
        ('{"label": "SUPPORTS", ', "invalid_json"),
        ("<think>I am still thinking {", "unterminated_think"),
        ('{"rationale": "x"}', "schema: missing field 'label'"),
        ('{"label": 3}', "schema: field 'label' is int, expected str"),
    ],
)
def test_malformed_model_output_is_a_clear_failure(text: str, error: str) -> None:
    result = parse_json_answer(text, {"label": str})
    assert not result.ok and result.value is None and result.error.startswith(error)


def test_json_schema_enters_the_cache_key_only_when_set(tiny_lm_dir: Path) -> None:
    from veracity.models.cache import request_key

    engine = TransformersEngine(str(tiny_lm_dir))
    plain = GenerationRequest.chat(HELLO)
    assert "json_schema" not in plain.params.to_dict(), "requests without a schema keep their cache keys"
    keys = {request_key(engine, GenerationRequest.chat(HELLO, json_schema=s))
            for s in ('{"type": "object"}', '{"type": "object", "required": ["label"]}')}
    assert len(keys) == 2 and request_key(engine, plain) not in keys
    with pytest.raises(ValueError, match="json_schema must be a JSON object"):
        SamplingParams(json_schema="[1]")


LETTERS = "abcdefghijklmnopqrstuvwxyz "


@pytest.mark.parametrize(("temperature", "regex"), [(0.0, None), (0.0, f"[{LETTERS}]{{24}}"),
                                                    (1.0, f"[{LETTERS}]{{24}}")])
def test_a_generation_config_with_penalties_changes_neither_logprobs_nor_tokens(
        tmp_path: Path, temperature: float, regex: str | None) -> None:
    """A model whose generation_config.json sets repetition_penalty and no_repeat_ngram_size (as several chat models
    ship), through ``veracity infer generate``: each log-prob is the raw model's (teacher-forced forward pass,
    renormalised over what the regex allows; none above 0) and a greedy answer is the raw model's argmax at every
    step — no penalty applied before the grammar mask and our own sampler."""
    import json

    import torch
    from tiny_models import build_tiny_llama

    from veracity import cli

    model = build_tiny_llama(tmp_path / "penalised", repetition_penalty=5.0, no_repeat_ngram_size=1)
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "a", "claim": "aaaa aaaa aaaa"}) + "\n")
    cli.main(["infer", "generate", "--input", str(items), "--output_dir", str(tmp_path / "run"), "--template",
              "Claim: {claim}", "--model", str(model), "--max_new_tokens", "24", "--temperature", str(temperature),
              "--n", "2", "--seed", "5", "--progress", "false", *(["--regex", regex] if regex else [])])
    (record,) = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    engine = TransformersEngine(str(model))
    prompt = engine.encode(GenerationRequest.chat([{"role": "user", "content": "Claim: aaaa aaaa aaaa"}]))
    allowed = engine.tokenizer(list(LETTERS), add_special_tokens=False)["input_ids"] if regex else None
    for candidate in record["result"]["candidates"]:
        tokens = engine.tokenizer(candidate["text"], add_special_tokens=False)["input_ids"]
        scored = candidate["token_logprobs"]
        assert len(tokens) == 24 and len(scored) >= 24 and max(scored) <= 0.0
        with torch.no_grad():
            logits = engine.model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1].float()
        if allowed:  # the grammar's mask: only the letters are left
            keep = torch.tensor([ids[0] for ids in allowed])
            masked = torch.full_like(logits, float("-inf"))
            masked[:, keep] = logits[:, keep]
            logits = masked
        raw = logits.log_softmax(-1)
        assert scored[:24] == pytest.approx([raw[k, t].item() for k, t in enumerate(tokens)], abs=1e-4)
        if temperature == 0:
            assert tokens == logits.argmax(-1).tolist()  # the raw argmax, repeats and all
            assert len(set(tokens)) < len(tokens)  # which no_repeat_ngram_size 1 would have forbidden
