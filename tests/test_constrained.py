"""Constrained decoding and per-request sampling in the transformers engine, on a tiny random model (the hardest
case: unconstrained, it never writes parsable JSON)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from veracity.models.engine import GenerationRequest, SamplingParams
from veracity.models.hf_engine import TransformersEngine

SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"enum": ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]},
        "rationale": {"type": "string", "maxLength": 12},
        "evidence": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 3}, "maxItems": 2},
    },
    "required": ["label", "rationale", "evidence"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Is the claim true? Answer in JSON."}]


@pytest.fixture(scope="module")
def engine(tiny_lm_dir: Path) -> TransformersEngine:
    return TransformersEngine(str(tiny_lm_dir), batch_size=4)


def _valid(answer: dict) -> bool:
    # (the rationale's maxLength is not checked here: a random byte-level model writes broken UTF-8 byte runs,
    # which decode to more replacement characters than the grammar counted)
    labels = SCHEMA["properties"]["label"]["enum"]
    return (set(answer) == {"label", "rationale", "evidence"} and answer["label"] in labels
            and isinstance(answer["rationale"], str)
            and len(answer["evidence"]) <= 2 and all(1 <= e <= 3 for e in answer["evidence"]))


def test_unconstrained_tiny_model_writes_no_json(engine: TransformersEngine) -> None:
    result = engine.generate([GenerationRequest.chat(ASK, max_new_tokens=40, n=4, temperature=1.0)])[0]
    assert not any(c.text.startswith("{") and c.text.endswith("}") for c in result.candidates)


def test_json_schema_gives_parsable_answers_per_row(engine: TransformersEngine) -> None:
    """n > 1 sampled rows, each with its own grammar state, two prompts in one batch: every answer follows the
    schema and ends by itself (a bounded schema ends before max_new_tokens)."""
    asks = [ASK, [{"role": "user", "content": "another, longer prompt that is padded differently"}]]
    requests = [GenerationRequest.chat(m, max_new_tokens=120, n=3, temperature=1.0, seed=5,
                                       json_schema=json.dumps(SCHEMA)) for m in asks]
    results = engine.generate(requests)
    answers = [c for r in results for c in r.candidates]
    assert len(answers) == 6
    for candidate in answers:
        assert candidate.finish_reason == "stop", candidate.text
        assert _valid(json.loads(candidate.text)), candidate.text
        assert candidate.token_logprobs and all(lp <= 1e-6 for lp in candidate.token_logprobs)
    assert len({c.text for c in answers}) > 1  # the rows sample independently


def test_greedy_json_schema(engine: TransformersEngine) -> None:
    result = engine.generate([GenerationRequest.chat(ASK, max_new_tokens=120, json_schema=json.dumps(SCHEMA))])[0]
    assert _valid(json.loads(result.candidates[0].text))


def test_regex_and_choice(engine: TransformersEngine) -> None:
    regex = engine.generate([GenerationRequest.chat(ASK, max_new_tokens=8, n=3, temperature=1.0,
                                                    regex=r"(10|[0-9])")])[0]
    for candidate in regex.candidates:
        assert re.fullmatch(r"(10|[0-9])", candidate.text), candidate.text
    choice = engine.generate([GenerationRequest.chat(ASK, max_new_tokens=8, n=4, temperature=1.0,
                                                     choice=("yes", "no"))])[0]
    assert {c.text for c in choice.candidates} <= {"yes", "no"}
    assert all(c.finish_reason == "stop" for c in choice.candidates)


def test_a_single_choice_has_log_probability_zero(engine: TransformersEngine) -> None:
    """The documented definition: log-probs renormalised over the tokens the constraint allows. With one string
    of one-byte tokens, each step (the end included) allows one token: every log-probability is 0."""
    result = engine.generate([GenerationRequest.chat(ASK, max_new_tokens=8, choice=("ok",))])[0]
    candidate = result.candidates[0]
    assert candidate.text == "ok"
    assert candidate.token_logprobs == pytest.approx([0.0, 0.0, 0.0], abs=1e-5)  # "o", "k", end of answer


def test_constrained_log_probs_are_the_unconstrained_ones_renormalised(engine: TransformersEngine) -> None:
    """The same greedy answer, unconstrained and under a constraint that admits it: the constrained log-probs are
    the plain ones renormalised over a subset, so never lower, and equal where everything was allowed."""
    plain = engine.generate([GenerationRequest.chat(ASK, max_new_tokens=6)])[0].candidates[0]
    assert plain.finish_reason == "length"
    allowed = "".join(sorted(set(plain.text)))
    regex = "[" + re.escape(allowed) + "]*"
    constrained = engine.generate([GenerationRequest.chat(ASK, max_new_tokens=6, regex=regex)])[0].candidates[0]
    assert constrained.text == plain.text
    for c, p in zip(constrained.token_logprobs, plain.token_logprobs, strict=True):
        assert c >= p - 1e-5
    assert sum(constrained.token_logprobs) > sum(plain.token_logprobs)  # a strict subset was allowed
    everything = engine.generate([GenerationRequest.chat(ASK, max_new_tokens=6, regex=r"[\s\S]*")])[0].candidates[0]
    assert everything.text == plain.text


def test_samples_do_not_depend_on_the_batch(tiny_lm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's samples are seeded from its own content: alone, batched with others, or in batches of another
    size, it gets the same candidates; and no two rows of a batch (other prompts, other candidates) share a noise
    stream, so a prompt's samples are never another's noise replayed."""
    import veracity.models.hf_engine as hf_engine

    seeds: list[list[int]] = []

    class Recording(hf_engine.RowSampler):
        def __init__(self, row_seeds, *args, **kwargs):
            seeds.append(list(row_seeds))
            super().__init__(row_seeds, *args, **kwargs)

    monkeypatch.setattr(hf_engine, "RowSampler", Recording)
    small = TransformersEngine(str(tiny_lm_dir), batch_size=1)
    large = TransformersEngine(str(tiny_lm_dir), batch_size=4)

    def request(text: str) -> GenerationRequest:
        return GenerationRequest.chat([{"role": "user", "content": text}], max_new_tokens=8, n=3, temperature=1.0,
                                      seed=11)

    target = request("the claim")
    alone = small.generate([target])[0]
    batched = large.generate([request("a much longer neighbour prompt, padded"), target, request("x")])[1]
    assert [c.text for c in alone.candidates] == [c.text for c in batched.candidates]
    assert len({c.text for c in alone.candidates}) > 1
    alone_seeds, batch_seeds = seeds
    assert len(batch_seeds) == 9 and len(set(batch_seeds)) == 9  # 3 prompts x 3 candidates: 9 streams
    assert batch_seeds[3:6] == alone_seeds  # the target's own streams, wherever it sits
    other_seed = small.generate([GenerationRequest(messages=target.messages,
                                                   params=SamplingParams(**{**target.params.to_dict(), "seed": 12}))])
    assert [c.text for c in other_seed[0].candidates] != [c.text for c in alone.candidates]


def test_sampling_params_take_one_constraint() -> None:
    with pytest.raises(ValueError, match="at most one"):
        SamplingParams(regex="a", choice=("a",))
    with pytest.raises(ValueError, match="choice"):
        SamplingParams(choice=())
    assert SamplingParams(choice=["a", "b"]).constraint == ("choice", '["a", "b"]')
    assert "regex" not in SamplingParams().to_dict()  # cache keys of unconstrained requests are unchanged
