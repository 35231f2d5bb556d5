"""AIC's answer and the Ev²R judge's counts under constrained decoding: each schema admits its own well-formed
answer and refuses malformed ones (the grammar the engine enforces), every answer the schema admits parses, the
token budgets hold the longest answer, the ``constrained`` switches (with thinking and the answer prefix), and
``veracity infer aic`` end to end on a tiny random model that, constrained, answers every claim — its
``metrics.json`` checked against values recomputed from its records."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from veracity.infer.eval.averitec_score import VERDICTS
from veracity.infer.eval.ev2r import (
    COUNT_KEYS,
    JUDGE_BUDGET,
    JUDGE_SCHEMA,
    MAX_COUNT,
    Ev2RSettings,
    judge,
    parse_judge_counts,
)
from veracity.infer.pipelines.aic.config import AICConfig
from veracity.infer.pipelines.aic.prompt import (
    ANSWER_TYPES,
    answer_budget,
    answer_schema,
    choose_label,
    parse_aic_answer,
)
from veracity.infer.structured import END_TOKENS, schema_text
from veracity.models.decoding import grammar_accepts
from veracity.models.engine import Candidate, Engine, EngineConfig, GenerationResult


def compact(value: Any) -> str:
    """JSON as the engines' grammars write it: ", " and ": " separators, no other whitespace."""
    return json.dumps(value, ensure_ascii=False)


def admits(schema: dict[str, Any], text: str) -> bool:
    return grammar_accepts("json_schema", schema_text(schema), text)


def aic_answer(questions: list[dict[str, Any]] | None = None, scores: tuple[int, ...] = (1, 5, 2, 1),
               verdict: str = "Refuted") -> dict[str, Any]:
    questions = questions if questions is not None else [
        {"question": "Who wrote the letter?", "answer": "Scoopertino, a satire site.", "source": 1,
         "answer_type": "Extractive"},
        {"question": "Did Connery star in an ad?", "answer": "No.", "source": 2, "answer_type": "Boolean"}]
    return {"questions": questions,
            "claim_veracity": {**dict(zip(VERDICTS, scores, strict=True)), "veracity_verdict": verdict}}


# --- AIC: the schema and the parser ------------------------------------------------------------------------------


def test_aic_schema_admits_its_example_and_the_parser_reads_it() -> None:
    schema = answer_schema(num_sources=2)
    text = compact(aic_answer())
    assert admits(schema, text)
    answer, error = parse_aic_answer(text, num_sources=2)
    assert error is None and answer is not None and not answer.repaired and not answer.notes
    assert [(q.question, q.source, q.answer_type) for q in answer.questions] == [
        ("Who wrote the letter?", 1, "Extractive"), ("Did Connery star in an ad?", 2, "Boolean")]
    assert answer.likert == dict(zip(VERDICTS, (1, 5, 2, 1), strict=True))
    assert (answer.label, answer.label_from, answer.stated_verdict) == ("Refuted", "likert", "Refuted")


def _question(**change: Any) -> dict[str, Any]:
    return {"question": "Q?", "answer": "A.", "source": 1, "answer_type": "Abstractive", **change}


MALFORMED = {
    "source outside the prompt's sources": aic_answer([_question(source=3)]),
    "source 0": aic_answer([_question(source=0)]),
    "source as a string": aic_answer([_question(source="1")]),
    "unknown answer type": aic_answer([_question(answer_type="boolean")]),
    "blank question": aic_answer([_question(question=" Q?")]),
    "no-break space question": aic_answer([_question(question="\u00a0")]),
    "empty question": aic_answer([_question(question="")]),
    "question of 201 characters": aic_answer([_question(question="Q" * 201)]),
    "quote in a question": aic_answer([_question(question='Q"x')]),  # no escapes: the budget counts characters
    "backslash in a question": aic_answer([_question(question="Q\\x")]),
    "newline in a question": aic_answer([_question(question="Q\nx")]),
    "quote in an answer": aic_answer([_question(answer='A"x')]),
    "answer of 301 characters": aic_answer([_question(answer="A" * 301)]),
    "no question": aic_answer([]),
    "eleven questions": aic_answer([_question()] * 11),
    "a key left out": aic_answer([{k: v for k, v in _question().items() if k != "answer_type"}]),
    "an extra key": aic_answer([_question(url="https://s.com")]),
    "Likert 6": aic_answer(scores=(1, 6, 2, 1)),
    "Likert 0": aic_answer(scores=(0, 5, 2, 1)),
    "Likert as text": {"questions": [_question()], "claim_veracity": {**dict.fromkeys(VERDICTS, "4 - Agree"),
                                                                     "veracity_verdict": "Refuted"}},
    "verdict not in the enum": aic_answer(verdict="Not enough evidence"),
    "no verdict": {"questions": [_question()], "claim_veracity": dict.fromkeys(VERDICTS, 3)},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_aic_schema_refuses_a_malformed_answer(case: str) -> None:
    assert not admits(answer_schema(num_sources=2), compact(MALFORMED[case]))


@pytest.mark.parametrize("text", [
    json.dumps(aic_answer(), indent=2),  # whitespace the compact grammar does not write
    "```json\n" + compact(aic_answer()) + "\n```",  # a code fence
    "<think>Source 1 says so.</think>" + compact(aic_answer()),  # a thinking block first
    compact(aic_answer()) + " ",
    compact(aic_answer())[:-1],  # cut before its end
])
def test_aic_schema_admits_the_json_alone(text: str) -> None:
    assert not admits(answer_schema(num_sources=2), text)


def test_the_question_bound_is_in_characters_and_both_ends_are_admitted() -> None:
    schema = answer_schema(num_sources=2, question_chars=5)
    assert admits(schema, compact(aic_answer([_question(question="Q")])))
    assert admits(schema, compact(aic_answer([_question(question="Q é漢!")])))  # five characters, not bytes
    assert not admits(schema, compact(aic_answer([_question(question="Q é漢!?")])))
    assert admits(schema, compact(aic_answer([_question(question="Q  x")])))  # inner whitespace is text


def test_without_sources_the_source_is_null_and_parses_as_none() -> None:
    schema = answer_schema(num_sources=0)
    text = compact(aic_answer([_question(source=None)]))
    assert admits(schema, text) and not admits(schema, compact(aic_answer([_question(source=1)])))
    answer, error = parse_aic_answer(text, num_sources=0)
    assert error is None and answer is not None and answer.questions[0].source is None and not answer.notes


def longest_answer(num_sources: int, max_questions: int, question_chars: int, answer_chars: int) -> str:
    """The longest answer in UTF-8 bytes (what a token budget counts): text of 4-byte characters."""
    item = {"question": "😀" * question_chars, "answer": "😀" * answer_chars, "source": num_sources,
            "answer_type": max(ANSWER_TYPES, key=len)}
    return compact({"questions": [item] * max_questions,
                    "claim_veracity": {**dict.fromkeys(VERDICTS, 5), "veracity_verdict": max(VERDICTS, key=len)}})


@pytest.mark.parametrize("bounds", [(10, 10, 200, 300), (10, 5, 200, 300), (3, 2, 40, 60)])
def test_the_budget_holds_the_longest_answer_the_schema_admits(bounds: tuple[int, int, int, int]) -> None:
    text = longest_answer(*bounds)
    assert admits(answer_schema(*bounds), text)
    assert answer_budget(*bounds) == len(text.encode()) + END_TOKENS  # a token is at least a byte; and the end
    assert parse_aic_answer(text, bounds[0], max_questions=bounds[1])[0] is not None
    assert (answer_budget(10), answer_budget(10, 3, 120, 180)) == (20964, 4025)  # the real and embedded configs


def sample_answer(rng: random.Random, num_sources: int, max_questions: int, question_chars: int,
                  answer_chars: int) -> dict[str, Any]:
    """A random answer within the schema's bounds, text drawn from characters a model may write (non-ASCII,
    inner and trailing blanks, and what the parser treats specially elsewhere: ``<think>``, fences, braces)."""
    pieces = ["a", "Z", "7", " ", "?", ".", "é", "漢", "😀", "\u2028", "\u00a0", "{", "}", "[", "<think>", "</think>",
              "```", "json", ":", ",", "'"]

    def text(low: int, high: int) -> str:
        out = ""
        target = rng.randint(low, high)
        while len(out) < target:
            out += rng.choice(pieces)
        return out[:target]

    questions = []
    for _ in range(rng.randint(1, max_questions)):
        first = rng.choice("AQwé漢<{`")  # the first character is never blank
        questions.append({"question": first + text(0, question_chars - 1), "answer": text(0, answer_chars),
                          "source": rng.randint(1, num_sources) if num_sources else None,
                          "answer_type": rng.choice(ANSWER_TYPES)})
    scores = [rng.randint(1, 5) for _ in VERDICTS]
    return aic_answer(questions, tuple(scores), rng.choice(VERDICTS))


@pytest.mark.parametrize("num_sources", [0, 1, 10])
def test_every_answer_generated_to_the_schema_parses_to_what_it_says(num_sources: int) -> None:
    rng = random.Random(num_sources)
    bounds = (num_sources, 4, 30, 40)
    schema = answer_schema(*bounds)
    for _ in range(12):
        data = sample_answer(rng, *bounds)
        text = compact(data)
        assert admits(schema, text), text
        answer, error = parse_aic_answer(text, num_sources, max_questions=4)
        assert error is None and answer is not None, text
        assert [q.question for q in answer.questions] == [q["question"].strip() for q in data["questions"]]
        assert [q.source for q in answer.questions] == [q["source"] for q in data["questions"]]
        assert [q.answer_type for q in answer.questions] == [q["answer_type"] for q in data["questions"]]
        verdicts = data["claim_veracity"]
        assert answer.likert == {v: verdicts[v] for v in VERDICTS}
        assert (answer.label, answer.label_from) == choose_label(answer.likert, verdicts["veracity_verdict"])
        assert not answer.repaired and answer.dropped_questions == 0


# --- AIC: the requests the pipeline makes ---------------------------------------------------------------------


class RecordingEngine(Engine):
    """Answers every request with ``answers`` in turn (the last one repeated) and keeps the requests."""

    kind = "recording"

    def __init__(self, *answers: str):
        self.answers, self.requests = list(answers), []

    @property
    def model_id(self) -> str:
        return "recording"

    def generate(self, requests):  # noqa: ANN001, ANN201
        self.requests.extend(requests)
        out = []
        for _ in requests:
            text = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            out.append(GenerationResult([Candidate(text, "length" if text.endswith("…") else "stop")]))
        return out


@pytest.fixture()
def store(tmp_path: Path) -> Any:
    from veracity.infer.pipelines.aic.store import KnowledgeStore

    folder = tmp_path / "store"
    folder.mkdir()
    (folder / "0.json").write_text(json.dumps({"url": "https://s.com/a", "url2text": ["Scoopertino wrote it."]})
                                   + "\n" + json.dumps({"url": "https://x.org/b", "url2text": ["It is satire."]})
                                   + "\n")
    return KnowledgeStore(folder)


def run_pipeline(config: AICConfig, store: Any, engine: RecordingEngine) -> dict[str, Any]:
    from veracity.infer.pipelines.aic.pipeline import AICPipeline

    pipeline = AICPipeline(config, EngineConfig(), store, [], engine=engine)
    return pipeline([{"id": "0", "claim": "Sean Connery refused an Apple ad.", "gold": "Refuted"}])[0]


def test_constrained_requests_carry_the_claims_schema_and_budget_and_retries_keep_them(
        tmp_path: Path, tiny_encoder_dir: Path, store: Any) -> None:
    config = AICConfig(embedder=str(tiny_encoder_dir), few_shot=0, k=4, sources=3, max_questions=4,
                       question_chars=50, answer_chars=70, parse_retries=1, output_dir=str(tmp_path / "run"),
                       answer_prefix='```json\n{"questions": [')  # not used under a constraint
    engine = RecordingEngine('{"questions": [{"question": "Q', compact(aic_answer()))
    record = run_pipeline(config, store, engine)
    assert record["status"] == "answered" and record["label"] == "Refuted"
    sources = len(record["sources"])
    assert sources == 2  # the store has two one-sentence documents: fewer than l = 3
    first, retry = engine.requests
    assert first.messages and first.prompt is None  # chat messages: no prefix rendered in
    for request in (first, retry):
        assert json.loads(request.params.json_schema) == answer_schema(sources, 4, 50, 70)
        assert request.params.max_new_tokens == answer_budget(sources, 4, 50, 70)
    assert (first.params.temperature, first.params.seed, retry.params.temperature, retry.params.seed) == \
        (0.0, 13, 0.7, 14)
    assert [a["json_schema"] for a in record["attempts"]] == [True, True]
    assert record["attempts"][0]["error"].startswith("invalid_json")
    assert record["attempts"][0]["max_new_tokens"] == answer_budget(sources, 4, 50, 70)


def test_an_answer_cut_by_the_budget_is_named_length(tmp_path: Path, tiny_encoder_dir: Path, store: Any) -> None:
    config = AICConfig(embedder=str(tiny_encoder_dir), few_shot=0, k=4, sources=2, parse_retries=0,
                       output_dir=str(tmp_path / "run"))
    record = run_pipeline(config, store, RecordingEngine('{"questions": [{"question": "Who …'))
    assert record["status"] == "failed" and record["failure"].startswith("length: ")


@pytest.mark.parametrize("change", [{"constrained": False}, {"thinking": "on"}])
def test_unconstrained_runs_and_thinking_runs_send_no_schema(tmp_path: Path, tiny_encoder_dir: Path, store: Any,
                                                             change: dict[str, Any]) -> None:
    config = AICConfig(embedder=str(tiny_encoder_dir), few_shot=0, k=4, sources=2, max_new_tokens=77,
                       output_dir=str(tmp_path / "run"), **change)
    assert not config.constrains
    thinking = "<think>Source 1 says it is satire.</think>\n" if change.get("thinking") == "on" else ""
    engine = RecordingEngine(thinking + "```json\n" + compact(aic_answer()) + "\n```")
    record = run_pipeline(config, store, engine)
    request = engine.requests[0]
    assert request.params.json_schema is None and request.params.max_new_tokens == 77
    assert record["status"] == "answered" and record["attempts"][0]["json_schema"] is False
    if change.get("thinking") == "on":
        assert request.messages[-1]["content"].endswith(" /think")


def test_an_answer_prefix_needs_a_local_engine_only_when_it_is_used(tmp_path: Path, tiny_encoder_dir: Path,
                                                                   store: Any) -> None:
    from veracity.infer.pipelines.aic.pipeline import AICPipeline

    config = AICConfig(embedder=str(tiny_encoder_dir), few_shot=0, k=4, sources=2, answer_prefix="{",
                       output_dir=str(tmp_path / "run"))
    AICPipeline(config, EngineConfig(), store, [], engine=RecordingEngine("x"))  # constrained: the prefix is unused
    unconstrained = AICConfig(**{**config.__dict__, "constrained": False})
    with pytest.raises(ValueError, match="answer_prefix needs the transformers engine"):
        AICPipeline(unconstrained, EngineConfig(), store, [], engine=RecordingEngine("x"))


def test_config_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="max_questions"):
        AICConfig(max_questions=0)
    with pytest.raises(ValueError, match="question_chars"):
        AICConfig(question_chars=0)
    assert AICConfig().constrains and not AICConfig(thinking="on").constrains and AICConfig(thinking="off").constrains


# --- Ev²R: the judge's counts -------------------------------------------------------------------------------------


def counts(*values: Any) -> dict[str, Any]:
    return dict(zip(COUNT_KEYS, values, strict=True))


def test_judge_schema_admits_its_example_and_the_parser_reads_it() -> None:
    text = compact(counts(4, 3, 5, 2))
    assert admits(JUDGE_SCHEMA, text)
    scores, error = parse_judge_counts(text)
    assert error is None and (scores["precision"], scores["recall"]) == (0.75, 0.4)
    # no predicted fact is admitted and parses (precision undefined)
    assert parse_judge_counts(compact(counts(0, 0, 1, 0)))[0]["precision"] is None
    assert admits(JUDGE_SCHEMA, compact(counts(0, 0, 1, 0)))


@pytest.mark.parametrize("value", [
    counts(-1, 0, 5, 2), counts(4, 3, 0, 0), counts(101, 3, 5, 2), counts(4, 3, 5, 2.5), counts(4, "3", 5, 2),
    counts(4, 3, 5, None), {k: 1 for k in COUNT_KEYS[:3]}, {**counts(4, 3, 5, 2), "recall": 1},
    dict(reversed(counts(4, 3, 5, 2).items())),  # the keys in another order
])
def test_judge_schema_refuses_a_malformed_answer(value: dict[str, Any]) -> None:
    assert not admits(JUDGE_SCHEMA, compact(value))


def test_judge_budget_holds_the_longest_answer() -> None:
    text = compact(counts(*[MAX_COUNT] * 4))
    assert admits(JUDGE_SCHEMA, text) and parse_judge_counts(text)[1] is None
    assert JUDGE_BUDGET == len(text.encode()) + END_TOKENS == 152


def test_a_support_above_its_count_is_admitted_but_the_parser_refuses_it() -> None:
    """The one rule between two fields: no JSON schema states it, so the parser (the final check) does."""
    text = compact(counts(2, 3, 4, 1))
    assert admits(JUDGE_SCHEMA, text)
    assert parse_judge_counts(text) == (None, "schema: a support count exceeds its facts count")


def test_every_count_answer_generated_to_the_schema_parses_or_breaks_only_that_rule() -> None:
    rng = random.Random(3)
    for _ in range(30):
        values = [rng.randint(0, MAX_COUNT), rng.randint(0, MAX_COUNT), rng.randint(1, MAX_COUNT),
                  rng.randint(0, MAX_COUNT)]
        text = compact(counts(*values))
        assert admits(JUDGE_SCHEMA, text)
        scores, error = parse_judge_counts(text)
        if values[1] > values[0] or values[3] > values[2]:
            assert error == "schema: a support count exceeds its facts count"
        else:
            assert error is None and scores["recall"] == values[3] / values[2]


@pytest.mark.parametrize("constrained", [True, False])
def test_judge_requests_carry_the_schema_and_its_budget(constrained: bool) -> None:
    engine = RecordingEngine("nope", compact(counts(2, 1, 2, 2)))
    settings = Ev2RSettings(ev2r_constrained=constrained, ev2r_max_new_tokens=64)
    outcome = judge(engine, ["judge this", None], settings)
    assert outcome[0].recall == 1.0 and outcome[0].precision == 0.5 and len(outcome[0].attempts) == 2
    assert len(engine.requests) == 2  # the failure retried; no call for the prompt without predicted evidence
    for request in engine.requests:
        if constrained:
            assert json.loads(request.params.json_schema) == JUDGE_SCHEMA
            assert request.params.max_new_tokens == JUDGE_BUDGET
        else:
            assert request.params.json_schema is None and request.params.max_new_tokens == 64
    assert [r.params.temperature for r in engine.requests] == [0.0, 0.7]


def test_a_constrained_tiny_random_judge_writes_the_counts(tiny_lm_dir: Path) -> None:
    """A random model never writes the JSON unconstrained; constrained, every answer decodes with the four
    counts in range, and only the cross-field rule can still fail it."""
    from veracity.models.hf_engine import TransformersEngine

    engine = TransformersEngine(str(tiny_lm_dir), batch_size=4)
    settings = Ev2RSettings(ev2r_prompt="Claim: {claim}\nReference:\n{reference}\nPredicted:\n{predicted}\nCounts?",
                            ev2r_retries=0, ev2r_temperature=1.0, ev2r_seed=5)
    prompts = [f"Claim: claim {i}\nReference: r\nPredicted: p" for i in range(4)]
    outcomes = judge(engine, prompts, settings)
    for outcome in outcomes:
        attempt = outcome.attempts[0]
        value = json.loads(attempt["text"])
        assert list(value) == list(COUNT_KEYS)
        assert all(0 <= value[k] <= MAX_COUNT for k in COUNT_KEYS) and value[COUNT_KEYS[2]] >= 1
        assert attempt["error"] in (None, "schema: a support count exceeds its facts count")
        assert outcome.failed == (attempt["error"] is not None)


# --- veracity infer aic end to end, constrained, on a tiny random model ---------------------------------------------


@pytest.fixture(scope="module")
def long_tiny_lm_dir(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Llama with 8,192 positions (rotary: the same weights), so the AIC prompt fits."""
    folder = tmp_path_factory.mktemp("tiny_llama_long") / "model"
    shutil.copytree(tiny_lm_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 8192
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def dev_claims() -> list[dict[str, Any]]:
    """Eight AVeriTeC dev claims, two of each verdict, each with its own gold QA pairs (the store's documents)."""
    topics = ["Sean Connery wrote to Steve Jobs", "Bananas are berries", "The moon landing was filmed in 1969",
              "Masks stop the flu", "Paris is the capital of France", "Coffee causes cancer",
              "The Great Wall is visible from space", "Tomatoes are vegetables"]
    claims = []
    for i, topic in enumerate(topics):
        qa = [{"question": f"Is it true that {topic.lower()}?", "answers": [
            {"answer": f"A report says {topic.lower()} is {'true' if i % 2 else 'disputed'}.",
             "answer_type": "Abstractive", "source_url": f"https://news{i}.example/a"}]},
              {"question": f"Who said {topic.lower()}?", "answers": [
                  {"answer": "No", "answer_type": "Boolean", "source_url": f"https://news{i}.example/b",
                   "boolean_explanation": "Nobody on record."}]}]
        claims.append({"claim": f"{topic}.", "label": VERDICTS[i % 4], "justification": "", "speaker": None,
                       "claim_date": "01-01-2020", "questions": qa})
    return claims


def test_infer_aic_constrained_on_a_tiny_random_model_answers_and_its_metrics_follow_its_records(
        mutable_data_root: Path, tmp_path: Path, tiny_encoder_dir: Path, long_tiny_lm_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sklearn.metrics import accuracy_score, f1_score

    from veracity import cli
    from veracity.data_prep.prepare import PrepConfig, prepare
    from veracity.models.nltk_data import ensure_nltk_data

    ensure_nltk_data(tmp_path / "cache" / "nltk_data")
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))
    (mutable_data_root / "averitec" / "dev.json").write_text(json.dumps(dev_claims()))
    prepared = tmp_path / "prep"
    prepare(PrepConfig(data_root=str(mutable_data_root), output_dir=str(prepared), datasets=["averitec"]))
    out = tmp_path / "run"
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert cli.main(["infer", "aic", "--config", "configs/pipelines/aic_embedded.yaml", "--prepared_dir",
                     str(prepared), "--embedder", str(tiny_encoder_dir), "--model", str(long_tiny_lm_dir),
                     "--max_questions", "2", "--question_chars", "40", "--answer_chars", "60", "--cache", "",
                     "--output_dir", str(out), "--progress", "false"]) == 0
    records = [json.loads(line)["result"] for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records) == [str(i) for i in range(8)]
    # constrained, the random model answers every claim: parsed answers, no failure, no repair
    for record in records:
        assert record["status"] == "answered" and record["failure"] is None, record["attempts"]
        attempt = record["attempts"][-1]
        assert attempt["json_schema"] and attempt["finish_reason"] == "stop" and attempt["error"] is None
        assert attempt["max_new_tokens"] == answer_budget(len(record["sources"]), 2, 40, 60)
        answer = record["answer"]
        assert 1 <= len(answer["questions"]) <= 2 and not answer["repaired"] and len(answer["likert"]) == 4
        assert record["label"] in VERDICTS
        assert (record["label"], answer["label_from"]) == choose_label(answer["likert"], answer["stated_verdict"])
        assert all(q["url"] == record["sources"][q["source"] - 1]["url"] for q in answer["questions"])
    assert (out / "failures.jsonl").read_text() == ""
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["answered"], summary["failed"]) == (8, 0)
    predictions = json.loads((out / "predictions.json").read_text())
    assert {p["claim_id"]: p["pred_label"] for p in predictions} == {r["id"]: r["label"] for r in records}
    # metrics.json against values recomputed from the records and the gold the run wrote
    gold = {g["claim_id"]: g["label"] for g in json.loads((out / "gold.json").read_text())}
    by_id = {r["id"]: r["label"] for r in records}
    ids = sorted(gold)
    y_true = [gold[i] for i in ids]
    y_pred = [by_id.get(i) or "(none)" for i in ids]
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    assert metrics["n"] == len(gold) == 8
    assert metrics["n_missing_predictions"] == sum(i not in by_id for i in ids) == 0
    assert metrics["label_accuracy"] == pytest.approx(accuracy_score(y_true, y_pred))
    assert metrics["macro_f1"] == pytest.approx(f1_score(y_true, y_pred, labels=list(VERDICTS), average="macro",
                                                         zero_division=0))
    for verdict, value in metrics["label_f1"].items():
        assert value == pytest.approx(f1_score(y_true, y_pred, labels=[verdict], average="macro", zero_division=0))
    assert 0.0 <= metrics["q_only"] <= 1.0 and 0.0 <= metrics["qa"] <= 1.0
    assert metrics["old_averitec_score"] <= metrics["label_accuracy"]  # counted needs the right label too
