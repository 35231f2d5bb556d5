"""The yes/no judge of UTS ShadowVal and of the M4 scorer under constrained decoding: its format (a choice of the
words the prompt asks for, which the parser reads), its token budget, the ``constrained`` switch, and both judges
end to end through the command line on a tiny random model, which then answers yes or no to every cite."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from veracity.infer.eval.citation_judge import (
    DEFAULT_JUDGE_PROMPT,
    UNCONSTRAINED_MAX_NEW_TOKENS,
    VERDICT_CHOICES,
    Judge,
    parse_verdict,
)
from veracity.infer.pipelines.uts.config import UTSConfig
from veracity.infer.structured import choice_budget
from veracity.models.decoding import grammar_accepts
from veracity.models.engine import Candidate, Engine, EngineConfig, GenerationRequest, GenerationResult

CHOICE_SPEC = json.dumps(list(VERDICT_CHOICES))


# --- the format -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer, verdict", [("yes", True), ("no", False)])
def test_the_choice_admits_each_verdict_and_the_parser_reads_it(answer: str, verdict: bool) -> None:
    assert grammar_accepts("choice", CHOICE_SPEC, answer)
    assert parse_verdict(answer) is verdict


@pytest.mark.parametrize("answer", ["Yes", "NO", "yes.", " yes", "yess", "y", "maybe", "", "The statement is"])
def test_the_choice_rejects_anything_else(answer: str) -> None:
    assert not grammar_accepts("choice", CHOICE_SPEC, answer)


def test_the_prompt_asks_for_the_words_the_choice_allows() -> None:
    assert "Answer yes or no." in DEFAULT_JUDGE_PROMPT
    assert VERDICT_CHOICES == ("yes", "no")


# --- requests and the switch ----------------------------------------------------------------------------------


class RecordingEngine(Engine):
    """Answers ``answer`` to every request and keeps the requests."""

    kind = "recording"

    def __init__(self, answer: str = "yes"):
        self.answer, self.requests = answer, []

    @property
    def model_id(self) -> str:
        return "recording"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.requests.extend(requests)
        return [GenerationResult([Candidate(self.answer, "stop")]) for _ in requests]


def test_a_constrained_judge_asks_for_the_choice_with_its_budget() -> None:
    params = Judge(RecordingEngine()).request("The dam held.", "The dam held in 1990.").params
    assert params.choice == VERDICT_CHOICES and params.json_schema is None and params.regex is None
    assert params.max_new_tokens == choice_budget(VERDICT_CHOICES) == 7
    assert params.temperature == 0.0


def test_an_unconstrained_judge_asks_as_before() -> None:
    params = Judge(RecordingEngine(), constrained=False).request("s", "e").params
    assert params.choice is None and params.max_new_tokens == UNCONSTRAINED_MAX_NEW_TOKENS == 4
    assert "choice" not in params.to_dict()  # the cache key of an unconstrained request is today's
    assert Judge(RecordingEngine(), constrained=False, max_new_tokens=12).request("s", "e").params.max_new_tokens == 12
    # the engines' one rule: max_new_tokens is the budget of an answer not held to the format
    assert Judge(RecordingEngine(), max_new_tokens=12).request("s", "e").params.max_new_tokens == 7


def test_the_pipeline_passes_its_constrained_setting_to_the_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    import veracity.models.engine_factory as engine_module
    from veracity.infer.pipelines.uts.pipeline import UTSPipeline

    item = {"id": "i1", "claim": "The council closed the bridge.", "verdict": "Refuted",
            "evidence": [{"url": "https://a.example.org/x", "text": "The council closed the old bridge on Monday."}]}
    for constrained, choice in ((True, VERDICT_CHOICES), (False, None)):
        engine = RecordingEngine("no")
        monkeypatch.setattr(engine_module, "make_engine", lambda config, engine=engine: engine)
        pipeline = UTSPipeline(UTSConfig(shadowval=True, constrained=constrained), EngineConfig())
        pipeline([item])
        assert [r.params.choice for r in engine.requests] == [choice]
    with pytest.raises(ValueError, match="judge_max_new_tokens"):
        UTSConfig(judge_max_new_tokens=0)


# --- end to end on a tiny random model --------------------------------------------------------------------------


def _items() -> list[dict]:
    def evidence(topic: str) -> str:
        return (f"The report on the {topic} was published on Monday morning. Officials said the {topic} had been "
                f"reviewed twice by the council. Residents asked whether the {topic} would change their bills. "
                f"The final decision on the {topic} is expected next spring.")

    return [{"id": f"i{k}", "claim": f"The council changed the {topic}.", "claimant": "A blog", "verdict": "Refuted",
             "evidence": [{"url": f"https://news{k}.example.org/{topic}", "text": evidence(topic)},
                          {"url": f"https://other{k}.example.com/{topic}", "text": evidence(f"new {topic}")}],
             "reference_article": f"A blog said the council changed the {topic}. The council said it did not. "
                                  f"The {topic} is unchanged."}
            for k, topic in enumerate(["bridge", "water rates", "bus routes"], start=1)]


@pytest.fixture(scope="module")
def tiny_nli_dir(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    from tiny_models import build_tiny_nli

    return build_tiny_nli(tmp_path_factory.mktemp("tiny_nli"), tiny_encoder_dir,
                          {0: "entailment", 1: "neutral", 2: "contradiction"})


# The default prompt with the statement first: on this tiny model it draws both verdicts (the default prompt draws
# "no" for every cite here), so both of ShadowVal's outcomes are reached.
PROMPT = "Statement: {statement}\nEvidence: {evidence}\nIs the statement supported by the evidence? Answer yes or no."


def test_shadowval_and_m4_judges_answer_every_cite_through_the_cli(tmp_path: Path, tiny_lm_dir: Path,
                                                                   tiny_nli_dir: Path) -> None:
    from veracity import cli

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(item) + "\n" for item in _items()))
    out, cache = tmp_path / "uts", tmp_path / "judge.sqlite"
    judge_options = ["--model", str(tiny_lm_dir), "--batch_size", "8", "--judge_prompt", PROMPT, "--cache", str(cache)]
    assert cli.main(["infer", "uts", "--items", str(items), "--frame", "plain", "--shadowval", "true",
                     "--max_tries", "2", *judge_options, "--output_dir", str(out), "--progress", "false"]) == 0

    # ShadowVal: every question got a verdict the grammar allows, read by the parser
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok"] * 3
    tries = [t for r in records for c in r["result"]["cites"] for t in c["tries"]]
    cites = [c for r in records for c in r["result"]["cites"]]
    assert len(cites) == 6 and all(c["tries"] for c in cites)
    for attempt in tries:
        assert attempt["answer"] in VERDICT_CHOICES and "error" not in attempt, attempt
        assert attempt["supported"] is (attempt["answer"] == "yes")
    for cite in cites:  # the outcome follows from the verdicts
        yes = [t["candidate"] for t in cite["tries"] if t["supported"]]
        assert (cite["outcome"], cite["chosen"]) == (("accepted", yes[0]) if yes else ("fallback", 0))
        assert len(cite["tries"]) == (yes[0] + 1 if yes else min(2, len(cite["candidates"])))

    # summary.json counts are the records' counts
    summary = json.loads((out / "summary.json").read_text())
    outcomes: dict[str, int] = {}
    for cite in cites:
        outcomes[cite["outcome"]] = outcomes.get(cite["outcome"], 0) + 1
    assert summary["cite_outcomes"] == outcomes and summary["articles"] == 3
    judge = summary["judge"]
    assert (judge["unparsed"], judge["errors"]) == (0, 0)
    assert judge["asked"] == len(tries)  # every question distinct
    assert judge["yes"] == sum(t["supported"] for t in tries) and judge["no"] == len(tries) - judge["yes"]
    assert 0 < judge["yes"] < judge["asked"] and set(outcomes) == {"accepted", "fallback"}

    # M4 scored with the same judge, constrained: every cite sentence judged, metrics.json from per_item.jsonl
    scored = tmp_path / "m4"
    assert cli.main(["eval", "m4", "--articles", str(out / "articles.jsonl"), "--items", str(out / "items.jsonl"),
                     "--output_dir", str(scored), "--nli_model", str(tiny_nli_dir), *judge_options]) == 0
    details = json.loads((scored / "details.json").read_text())
    rows = [json.loads(line) for line in (scored / "per_item.jsonl").read_text().splitlines()]
    answers = details["judge_answers"]
    judged = [c for row in rows for c in row["cites"]]
    assert details["judge_constraint"] == {"choice": ["yes", "no"]}
    assert (answers["unparsed"], answers["errors"]) == (0, 0)
    assert len(judged) == details["cite_sentences"] == 6 and all(len(c["urls"]) == 1 for c in judged)
    assert answers["asked"] == 6 and answers["yes"] == sum(c["supported"] for c in judged)
    # the scorer asks what ShadowVal asked (same judge, prompt and constraint): replayed from the cache, same verdicts
    assert answers["cached"] == 6
    assert [c["supported"] for c in judged] == [c["outcome"] == "accepted" for c in cites]
    for row in rows:
        assert row["malformed"] == 0 and row["coverage"] == 1.0
        recall = sum(c["supported"] for c in row["cites"]) / len(row["cites"])
        assert row["citation_recall"] == pytest.approx(recall) and row["citation_precision"] == pytest.approx(recall)
        assert row["m4"] == pytest.approx(np.mean([row["entailment"], recall, recall, 1.0]))
    metrics = json.loads((scored / "metrics.json").read_text())
    means = {k: np.mean([r[k] for r in rows]) for k in ("entailment", "citation_recall", "citation_precision",
                                                        "coverage")}
    assert metrics["n"] == 3
    for key, value in means.items():
        assert metrics[key] == pytest.approx(value)
    assert metrics["m4"] == pytest.approx(np.mean(list(means.values())))
