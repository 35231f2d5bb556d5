"""``VLLMEngine`` on the real vLLM, in process, on the embedded SmolLM2 (``-m server``: .venv-vllm; issue 45)."""

from __future__ import annotations

import pytest
from vllm_real import CLAIM, LLM_KWARGS, PASSAGES, embedded_folder, need_vllm, pipeline_formats, set_env

from veracity.models.engine import LOGPROB_DEFINITION, GenerationRequest

pytestmark = pytest.mark.server
need_vllm()

HELLO = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def engine():
    from veracity.models.vllm_engine import VLLMEngine

    set_env()
    engine = VLLMEngine(str(embedded_folder()), dtype="float32", **LLM_KWARGS)
    yield engine
    engine.close()


def test_n_candidates_at_temperature_with_seeded_repeats(engine) -> None:
    ask = GenerationRequest.chat(HELLO, n=4, temperature=1.0, max_new_tokens=12, seed=7)
    first, again = engine.generate([ask, ask])
    other = engine.generate([GenerationRequest.chat(HELLO, n=4, temperature=1.0, max_new_tokens=12, seed=8)])[0]
    assert first.ok and len(first.candidates) == 4 and len({c.text for c in first.candidates}) > 1
    assert [c.text for c in again.candidates] == [c.text for c in first.candidates], "same seed, same samples"
    assert [c.text for c in other.candidates] != [c.text for c in first.candidates]
    for c in first.candidates:
        assert c.token_logprobs and len(c.token_logprobs) == c.num_tokens and all(lp <= 0 for lp in c.token_logprobs)


def test_greedy_with_n_is_one_answer_repeated(engine) -> None:
    result = engine.generate([GenerationRequest.chat(HELLO, n=3, max_new_tokens=10)])[0]
    assert result.ok and len(result.candidates) == 3 and len({c.text for c in result.candidates}) == 1


@pytest.mark.parametrize("k", range(5))
def test_every_pipelines_format_parses(engine, k: int) -> None:
    """Each answer is in its format and ends within its compact budget. Ev²R's counts did not while a schema went to
    vLLM as ``json=`` (free whitespace: vLLM 0.32 ignores the request's disable_any_whitespace); it goes as the
    transformers engine's grammar now (models/vllm_engine.py)."""
    name, messages, constraint, parse = pipeline_formats()[k]
    results = engine.generate([GenerationRequest.chat(messages, n=3, temperature=1.0, seed=s, **constraint)
                               for s in (1, 2)])
    texts = [c.text for r in results for c in r.candidates]
    assert all(r.ok for r in results) and len(texts) == 6
    assert all(parse(t) is not None for t in texts), (name, texts)
    assert all(c.finish_reason == "stop" for r in results for c in r.candidates), (name, "ends within its budget")


def test_reported_decoding(engine) -> None:
    for kinds in (["json_schema"], ["regex"], ["choice"]):
        assert engine.decoding(kinds) == {"constrained": True, "logprob_definition": LOGPROB_DEFINITION}


def test_logprobs_match_the_transformers_engine(engine) -> None:
    """Same model, same definition: greedy answers and their token log-probs agree with the local engine's."""
    from veracity.infer.pipelines.r2vc.prompt import prompt_messages
    from veracity.models.hf_engine import TransformersEngine

    local = TransformersEngine(str(embedded_folder()), dtype="float32")
    requests = [GenerationRequest.chat(prompt_messages(CLAIM, PASSAGES), max_new_tokens=16),
                GenerationRequest.chat(HELLO, max_new_tokens=16)]
    for ours, theirs in zip(engine.generate(requests), local.generate(requests), strict=True):
        a, b = ours.candidates[0], theirs.candidates[0]
        assert a.text == b.text
        assert a.mean_logprob == pytest.approx(b.mean_logprob, abs=2e-3)


def test_a_seeded_batch_larger_than_one_step_runs_as_one_call(engine, caplog: pytest.LogCaptureFixture) -> None:
    """R2VC's seeded candidates for 24 claims failed as a batch on vLLM's CPU platform ("CPU Generator does not use
    offset": vLLM rewinds a seeded request's generator after a chunked prefill) and crawled through the one-by-one
    retry. 12 seeded prompts of ≈ 600 tokens, 2 samples each, are more than one step's token budget: they run as one
    call, every result answers, and the same seeds give the same samples again."""
    background = "The tower was built in 1889 for the World's Fair and is made of wrought iron. " * 25
    batch = [GenerationRequest.chat([{"role": "user", "content": f"{background} Question {i}: name a colour."}],
                                    n=2, temperature=0.7, max_new_tokens=8, seed=13) for i in range(12)]
    with caplog.at_level("WARNING", logger="veracity.models.vllm_engine"):
        first, again = engine.generate(batch), engine.generate(batch)
    assert "retrying one by one" not in caplog.text
    assert all(r.ok and len(r.candidates) == 2 for r in first), [r.error for r in first if not r.ok][:1]
    assert [[c.text for c in r.candidates] for r in again] == [[c.text for c in r.candidates] for r in first]
