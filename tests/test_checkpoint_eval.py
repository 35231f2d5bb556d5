"""Classification/calibration metrics on hand-made inputs; checkpoint evaluation of a generator and an NLI model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from veracity.data_prep.schema import TERNARY_LABELS
from veracity.infer.metrics import (
    accuracy,
    accuracy_by_group,
    brier_score,
    confusion,
    expected_calibration_error,
    macro_f1,
)
from veracity.infer.pipelines.r2vc.prompt import format_answer
from veracity.models.engine import Candidate, Engine, GenerationResult


def test_metrics_known_values() -> None:
    gold = ["S", "S", "R", "N"]
    pred = ["S", "R", "R", None]
    assert accuracy(gold, pred) == 0.5
    # S: tp1 fp0 fn1 → 2/3; R: tp1 fp1 fn0 → 2/3; N: tp0 → 0
    assert macro_f1(gold, pred, ["S", "R", "N"]) == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)
    assert confusion(gold, pred, ["S", "R", "N"])["N"]["(none)"] == 1
    assert brier_score(np.array([[1.0, 0.0], [0.5, 0.5]]), [0, 1]) == pytest.approx((0 + 0.5) / 2)
    # two bins: conf 0.9 (acc 1.0) and conf 0.3 (acc 0.0)
    assert expected_calibration_error([0.9, 0.9, 0.3, 0.3], [True, True, False, False], bins=10) == pytest.approx(
        0.5 * 0.1 + 0.5 * 0.3)
    assert expected_calibration_error([], []) == 0.0
    assert accuracy_by_group(gold, pred, ["b", "a", "b", None]) == {  # None: not in any group
        "a": {"examples": 1, "accuracy": 0.0}, "b": {"examples": 2, "accuracy": 1.0}}


class ScriptedEngine(Engine):
    """Answers with the gold label for claims it knows, garbage otherwise."""

    kind = "scripted"

    def __init__(self, answers: dict[str, str]):
        self.answers = answers

    @property
    def model_id(self) -> str:
        return "scripted"

    def generate(self, requests):
        results = []
        for r in requests:
            claim = r.messages[1]["content"].split("\n")[0].removeprefix("Claim: ")
            label = self.answers.get(claim)
            text = format_answer(label, "because [1]", [1]) if label else "I think it is true."
            results.append(GenerationResult([Candidate(text, "stop")]))
        return results


def test_generator_eval_counts_parse_failures_as_wrong(prepared_dir: Path) -> None:
    from veracity.infer.checkpoint_eval import CheckpointEvalArgs, evaluate_generator, load_examples

    examples = load_examples(CheckpointEvalArgs(prepared_dir=str(prepared_dir)), "vitaminc")
    known = {e.claim: e.label for e in examples[:4]}
    metrics, rows = evaluate_generator(ScriptedEngine(known), examples, 32)
    assert metrics["examples"] == len(examples) == 7
    assert metrics["accuracy"] == pytest.approx(4 / 7)
    assert metrics["parse_failure_rate"] == pytest.approx(3 / 7) and metrics["failures"] == {"no_json_object": 3}
    assert [r["id"] for r in rows] == [e.id for e in examples]
    assert [r["prediction"] for r in rows[:4]] == [e.label for e in examples[:4]] and rows[4]["prediction"] is None
    assert rows[4]["answer"] == "I think it is true." and rows[4]["error"].startswith("no_json_object")


def test_generator_eval_job_with_a_real_engine(prepared_dir: Path, tiny_lm_dir: Path, tmp_path: Path) -> None:
    import yaml
    from sklearn.metrics import accuracy_score

    from veracity.infer.checkpoint_eval import main

    free = main(["--kind", "generator", "--model", str(tiny_lm_dir), "--prepared_dir", str(prepared_dir),
                 "--sources", "vitaminc", "--max_new_tokens", "8", "--constrained", "false",
                 "--output_dir", str(tmp_path / "free")])
    assert free["vitaminc"]["parse_failure_rate"] == 1.0  # unconstrained, a random tiny model writes no JSON
    assert yaml.safe_load((tmp_path / "free" / "run_config.yaml").read_text())["decoding"]["constrained"] is False
    results = main(["--kind", "generator", "--model", str(tiny_lm_dir), "--prepared_dir", str(prepared_dir),
                    "--sources", "vitaminc", "--rationale_max_chars", "16", "--output_dir", str(tmp_path / "c")])
    assert results["vitaminc"]["parse_failure_rate"] == 0.0  # constrained to the schema, it always answers
    rows = [json.loads(line) for line in (tmp_path / "c" / "predictions.jsonl").read_text().splitlines()]
    assert all(r["prediction"] in TERNARY_LABELS and r["error"] is None for r in rows)
    assert results["vitaminc"]["accuracy"] == pytest.approx(
        accuracy_score([r["gold"] for r in rows], [r["prediction"] for r in rows]))
    assert yaml.safe_load((tmp_path / "c" / "run_config.yaml").read_text())["decoding"]["constrained"] is True
    assert "| vitaminc | 7 |" in (tmp_path / "c" / "results.md").read_text()


@pytest.fixture(scope="module")
def tiny_nli_dir(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    from tiny_models import build_tiny_nli

    return build_tiny_nli(tmp_path_factory.mktemp("tiny_nli"), tiny_encoder_dir,
                          {0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"})


def test_nli_eval_job(prepared_dir: Path, tiny_nli_dir: Path, tmp_path: Path) -> None:
    from veracity.infer.checkpoint_eval import main

    results = main(["--kind", "nli", "--nli_model", str(tiny_nli_dir), "--prepared_dir", str(prepared_dir),
                    "--sources", "vitaminc", "fever_symmetric", "--output_dir", str(tmp_path)])
    for source, metrics in results.items():
        total = sum(sum(row.values()) for row in metrics["confusion"].values())
        assert total == metrics["examples"] > 0, source
        assert 0.0 <= metrics["ece"] <= 1.0 and 0.0 <= metrics["brier"] <= 2.0
    assert json.loads((tmp_path / "metrics.json").read_text()).keys() == {"vitaminc", "fever_symmetric"}
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == sum(m["examples"] for m in results.values())
    assert {r["source"] for r in rows} == {"vitaminc", "fever_symmetric"}
    for row in rows:
        assert sum(row["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
        assert row["prediction"] == max(row["probabilities"], key=row["probabilities"].get)


def test_nli_eval_feeds_evidence_the_way_the_verifier_was_trained() -> None:
    from veracity.data_prep.schema import ClaimExample, EvidencePassage
    from veracity.infer.checkpoint_eval import evaluate_nli

    class Recorder:
        def __init__(self, evidence_titles: bool) -> None:
            self.evidence_titles, self.premises = evidence_titles, []

        def predict(self, premises: list[str], hypotheses: list[str]) -> np.ndarray:
            self.premises += premises
            return np.tile([0.8, 0.1, 0.1], (len(premises), 1))

    example = ClaimExample(id="x", claim="Fox made it.", label="SUPPORTS", evidence_text="Fox made it .", source="s",
                           split="dev", origin="o", evidence=[EvidencePassage("Fox made it .", title="Alvin")])
    for titles, premise in ((False, "Fox made it ."), (True, "Alvin: Fox made it .")):
        scorer = Recorder(titles)
        metrics, rows = evaluate_nli(scorer, [example])  # type: ignore[arg-type]
        assert metrics["accuracy"] == 1.0 and rows[0]["probabilities"]["SUPPORTS"] == pytest.approx(0.8)
        assert scorer.premises == [premise]


def test_accuracy_by_annotator_agreement(tmp_path: Path) -> None:
    from veracity.data_prep.schema import ClaimExample
    from veracity.infer.checkpoint_eval import label_metrics, markdown

    def example(label: str, votes: list[str] | None) -> ClaimExample:
        return ClaimExample(id="x", claim="c", label=label, evidence_text="e", source="s", split="dev", origin="o",
                            meta={"votes": votes} if votes is not None else {})

    examples = [example("SUPPORTS", ["SUPPORTS", "SUPPORTS"]), example("NOT ENOUGH INFO", ["SUPPORTS", "REFUTES"]),
                example("NOT ENOUGH INFO", ["NOT ENOUGH INFO", "SUPPORTS"]), example("REFUTES", None)]
    metrics = label_metrics(examples, ["SUPPORTS", "SUPPORTS", "NOT ENOUGH INFO", "REFUTES"])
    assert metrics["accuracy"] == 0.75
    assert metrics["by_agreement"] == {"NOT ENOUGH INFO, split": {"examples": 2, "accuracy": 0.5},
                                       "SUPPORTS, unanimous": {"examples": 1, "accuracy": 1.0}}
    metrics["ece"] = 0.0
    assert "| SUPPORTS, unanimous | 1 | 1.000 |" in markdown({"climate": metrics}, "nli")
    no_votes = label_metrics([example("REFUTES", None)], ["REFUTES"])
    assert "by_agreement" not in no_votes and "annotator" not in markdown({"s": {**no_votes, "ece": 0.0}}, "nli")
