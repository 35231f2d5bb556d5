"""Ev²R: the judge's counts → precision and recall, the recall threshold, retries, failures recorded and counted
(never scored as zero), and `veracity eval averitec --ev2r true` with a scripted judge engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fever8_files import write_fever8_csv

from veracity.data_prep.averitec import qa_pair
from veracity.infer.eval.ev2r import (
    Ev2RSettings,
    aggregate_ev2r,
    evidence_text,
    judge_prompt,
    parse_judge_counts,
    score_claims,
)
from veracity.models.engine import Candidate, Engine, GenerationResult


def counts(pred_total: int, pred_support: int, ref_total: int, ref_support: int) -> str:
    return json.dumps({"facts count predicted evidence": pred_total, "support predicted evidence": pred_support,
                       "facts count reference evidence": ref_total, "support reference evidence": ref_support})


class ScriptedJudge(Engine):
    """Answers by a marker found in the prompt; each marker has a list of answers, used in order."""

    kind = "scripted"

    def __init__(self, script: dict[str, list[str]]):
        self.script = {k: list(v) for k, v in script.items()}
        self.prompts: list[str] = []

    @property
    def model_id(self) -> str:
        return "judge"

    def generate(self, requests):  # noqa: ANN001, ANN201
        out = []
        for r in requests:
            prompt = r.messages[0]["content"]
            self.prompts.append(prompt)
            marker = next(m for m in self.script if m in prompt)
            out.append(GenerationResult([Candidate(self.script[marker].pop(0), "stop")]))
        return out


class DeadJudge(Engine):
    kind = "dead"

    @property
    def model_id(self) -> str:
        return "dead"

    def generate(self, requests):  # noqa: ANN001, ANN201
        raise ConnectionError("judge server unreachable")


def test_parse_judge_counts() -> None:
    scores, error = parse_judge_counts("Sure! " + counts(4, 3, 5, 2) + " Done.")
    assert error is None and scores is not None
    assert scores["precision"] == 0.75 and scores["recall"] == 0.4
    assert parse_judge_counts(counts(0, 0, 5, 0))[0]["precision"] is None  # no predicted facts: undefined
    assert parse_judge_counts('{"facts count predicted evidence": "4", "support predicted evidence": "1", '
                              '"facts count reference evidence": 2, "support reference evidence": 1}')[0]["recall"] \
        == 0.5
    assert parse_judge_counts(counts(4, 3, 0, 0)) == (None, "schema: zero reference facts (recall undefined)")
    assert parse_judge_counts(counts(2, 3, 4, 1)) == (None, "schema: a support count exceeds its facts count")
    assert parse_judge_counts('{"support reference evidence": 1}')[1].startswith("schema: missing")
    assert parse_judge_counts("recall is high")[1] == "no_json_object"


def test_prompt_renders_claim_and_both_sides() -> None:
    gold, pred = [qa_pair("Who?", "Scoopertino.")], [qa_pair("Who wrote it?", "A satire site.")]
    text = judge_prompt(Ev2RSettings().ev2r_prompt, "The claim.", gold, pred, questions_only=False)
    assert "Claim: The claim." in text
    assert "Reference evidence (human):\nQuestion: Who?\nAnswer: Scoopertino." in text
    assert "Predicted evidence (system):\nQuestion: Who wrote it?\nAnswer: A satire site." in text
    assert evidence_text(pred, questions_only=True) == "Question: Who wrote it?"
    eleven = [qa_pair(f"Q{i}", "a") for i in range(11)]
    assert "Q10" not in judge_prompt("{claim}{reference}{predicted}", "c", gold, eleven, False)  # first 10 only
    with pytest.raises(ValueError, match="predicted"):
        Ev2RSettings(ev2r_prompt="no placeholders {claim} {reference}")


def claims() -> list[tuple]:
    gold = [qa_pair("Who?", "X.")]
    return [("0", "MARK0", "Refuted", gold, "Refuted", [qa_pair("q", "a")]),
            ("1", "MARK1", "Supported", gold, "Supported", [qa_pair("q", "a")]),
            ("2", "MARK2", "Refuted", gold, "Supported", [qa_pair("q", "a")]),
            ("3", "MARK3", "Refuted", gold, None, [])]  # no prediction: recall 0 without a call


def test_scores_threshold_retry_and_recorded_failures() -> None:
    judge = ScriptedJudge({
        # Q+A prompts come first (one per claim), then the Q-only prompts
        "MARK0": [counts(2, 2, 4, 3), counts(2, 1, 2, 2)],  # recall 0.75 > 0.5, label right: counts
        "MARK1": ["garbage", counts(2, 2, 4, 2), "nope", "still nope"],  # Q+A parses on the retry; Q-only fails
        "MARK2": [counts(1, 1, 1, 1), counts(1, 1, 1, 1)],  # recall 1 but the wrong label
    })
    scored = score_claims(judge, claims(), Ev2RSettings())
    assert [c.qa.recall for c in scored] == [0.75, 0.5, 1.0, 0.0]
    assert scored[1].qa.attempts[0]["error"] == "no_json_object" and len(scored[1].qa.attempts) == 2
    assert scored[1].q_only.failed and scored[1].q_only.recall is None and len(scored[1].q_only.attempts) == 2
    # recall exactly at the threshold does not count (strictly above); a wrong label never counts
    assert [c.counted(0.5) for c in scored] == [True, False, False, False]
    metrics = aggregate_ev2r(scored, 0.5)
    assert metrics["ev2r_qa_judge_failures"] == 0 and metrics["ev2r_q_judge_failures"] == 1
    assert metrics["ev2r_qa_recall"] == pytest.approx((0.75 + 0.5 + 1.0 + 0.0) / 4)
    # the failed Q-only claim is left out of the mean, not scored 0: (1.0 + 1.0 + 0.0) / 3
    assert metrics["ev2r_q_only_recall"] == pytest.approx(2 / 3) and metrics["ev2r_q_judged"] == 3
    assert metrics["ev2r_new_averitec_score"] == 0.25
    assert "Question: Who?" in judge.prompts[-1] and "Answer:" not in judge.prompts[-1]  # Q-only prompt


def test_a_dead_judge_is_recorded_and_counted_not_zero() -> None:
    scored = score_claims(DeadJudge(), claims()[:2], Ev2RSettings(ev2r_retries=2))
    assert all(c.qa.failed and c.q_only.failed for c in scored)
    assert len(scored[0].qa.attempts) == 3 and "ConnectionError" in scored[0].qa.attempts[0]["error"]
    metrics = aggregate_ev2r(scored, 0.5)
    assert metrics["ev2r_qa_judge_failures"] == 2 and metrics["ev2r_qa_judged"] == 0
    assert metrics["ev2r_qa_recall"] is None and metrics["ev2r_new_averitec_score"] is None
    assert metrics["ev2r_new_averitec_score_failures_as_zero"] == 0.0


def test_eval_averitec_with_a_scripted_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from veracity.infer.eval import averitec
    from veracity.models.nltk_data import ensure_nltk_data

    cache = tmp_path / "cache"
    ensure_nltk_data(cache / "nltk_data")
    monkeypatch.setenv("VERACITY_CACHE", str(cache))
    judge = ScriptedJudge({"MARK0": [counts(2, 2, 2, 2), counts(1, 1, 1, 1)],
                           "MARK1": ["bad", "bad", counts(1, 0, 1, 0)]})
    monkeypatch.setattr(averitec, "make_engine", lambda config: judge)
    gold = write_fever8_csv(tmp_path / "gold.csv", [("0", "MARK0", [qa_pair("Who?", "X.")], "Refuted"),
                                             ("1", "MARK1", [qa_pair("When?", "2020.")], "Supported"),
                                             ("2", "MARK2", [qa_pair("Where?", "Here.")], "Refuted")], "gold")
    pred = write_fever8_csv(tmp_path / "pred.csv", [("0", "MARK0", [qa_pair("Who?", "X.")], "Refuted"),
                                             ("1", "MARK1", [qa_pair("When?", "2021.")], "Supported")], "pred")
    out = tmp_path / "eval"
    metrics = averitec.main(["--predictions", str(pred), "--gold", str(gold), "--output_dir", str(out),
                             "--progress", "false", "--ev2r", "true", "--ev2r_max_claims", "2"])
    saved = json.loads((out / "metrics.json").read_text())
    assert saved == {**saved, "ev2r_n": 2, "ev2r_qa_judge_failures": 1, "ev2r_q_judge_failures": 0,
                     "ev2r_qa_recall": 1.0, "ev2r_new_averitec_score": 1.0,
                     "ev2r_new_averitec_score_failures_as_zero": 0.5}
    assert metrics["n"] == 3 and "old_averitec_score" in saved  # the old score still covers every gold claim
    rows = {r["id"]: r for r in map(json.loads, (out / "per_claim.jsonl").read_text().splitlines())}
    assert rows["1"]["ev2r_qa"]["failed"] and rows["1"]["ev2r_counted"] is None
    assert rows["0"]["ev2r_counted"] is True and "ev2r_qa" not in rows["2"]  # claim 2 is outside the subset
