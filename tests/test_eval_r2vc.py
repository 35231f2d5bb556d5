"""`veracity eval r2vc` on hand-made records, every value computed by hand: abstentions count as NOT ENOUGH INFO,
and an error record counts as a wrong answer and is counted (issue #24, item 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veracity.infer.eval.r2vc import evaluate

S, R, N = "SUPPORTS", "REFUTES", "NOT ENOUGH INFO"


def record(claim_id: str, gold: str | None, label: str, abstained: bool, confidence: float, raw: float,
           source: str = "a") -> dict:
    """A claim record as the pipeline writes it: an abstention's prediction is NOT ENOUGH INFO, its label kept."""
    return {"id": claim_id, "gold": gold, "label": label, "prediction": N if abstained else label,
            "abstained": abstained, "confidence": confidence, "confidence_uncalibrated": raw,
            "outcome": "abstained_cal" if abstained else "answered", "source": source, "candidates": []}


RECORDS = [
    record("1", S, S, False, 0.9, 0.8),  # answered, right
    record("2", R, S, True, 0.3, 0.6),  # abstained: prediction NEI, gold REFUTES → wrong
    record("3", N, R, True, 0.2, 0.4),  # abstained: prediction NEI = gold → right (its label REFUTES is not)
    record("4", R, R, False, 0.8, 0.7),  # answered, right
    record("5", N, S, False, 0.7, 0.5),  # answered, wrong
]
ERROR = {"id": "6", "status": "error", "error": "RuntimeError: boom", "gold": S, "source": "a"}


def test_abstentions_count_as_not_enough_info_by_hand() -> None:
    from sklearn.metrics import f1_score

    metrics = evaluate(RECORDS)
    assert metrics["n"] == 5 and metrics["n_unlabelled"] == 0
    # predictions S, NEI, NEI, R, S against gold S, R, NEI, R, NEI: claims 1, 3, 4 right
    assert metrics["accuracy"] == pytest.approx(3 / 5)
    # per label F1 = 2tp / (2tp + fp + fn): S (tp 1, fp 1, fn 0) 2/3; R (1, 0, 1) 2/3; NEI (1, 1, 1) 1/2
    assert metrics["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 1 / 2) / 3)
    gold, pred = [r["gold"] for r in RECORDS], [r["prediction"] for r in RECORDS]
    assert metrics["macro_f1"] == pytest.approx(f1_score(gold, pred, labels=[S, R, N], average="macro"))
    # with the labels instead (abstention ignored) it would be S, S, R, R, S: only claims 1 and 4 right
    assert metrics["label_accuracy_before_abstention"] == pytest.approx(2 / 5)
    assert metrics["confusion"][N] == {S: 1, R: 0, N: 1, "(none)": 0}
    assert metrics["confusion"][R] == {S: 0, R: 1, N: 1, "(none)": 0}
    # answered: 1, 4, 5; their labels right, right, wrong
    assert (metrics["coverage"], metrics["answered"]) == (pytest.approx(3 / 5), 3)
    assert metrics["selective_accuracy"] == pytest.approx(2 / 3)
    # the label right: T F F T F at confidences .9 .3 .2 .8 .7 → Brier (.01 + .09 + .04 + .04 + .49) / 5
    assert metrics["brier"] == pytest.approx(0.67 / 5)
    # sorted .9 T, .8 T, .7 F, .3 F, .2 F: risks 0, 0, 1/3, 2/4, 3/5
    assert metrics["aurc"] == pytest.approx((0 + 0 + 1 / 3 + 2 / 4 + 3 / 5) / 5)
    assert metrics["outcomes"] == {"abstained_cal": 2, "answered": 3}


def test_an_error_record_is_a_wrong_answer_and_is_counted() -> None:
    from sklearn.metrics import f1_score

    metrics = evaluate(RECORDS, [ERROR, {"id": "7", "status": "error", "error": "x", "gold": None}])
    assert metrics["n"] == 6 and metrics["n_errors"] == 1
    assert metrics["n_unlabelled"] == 1  # the error without a gold label cannot be scored
    assert metrics["accuracy"] == pytest.approx(3 / 6)
    # claim 6 (gold S) is a miss of S: S (tp 1, fp 1, fn 1) 1/2; R 2/3; NEI 1/2
    assert metrics["macro_f1"] == pytest.approx((1 / 2 + 2 / 3 + 1 / 2) / 3)
    gold = [r["gold"] for r in RECORDS] + [S]
    pred = [r["prediction"] for r in RECORDS] + ["(none)"]
    assert metrics["macro_f1"] == pytest.approx(f1_score(gold, pred, labels=[S, R, N], average="macro"))
    assert metrics["confusion"][S]["(none)"] == 1
    assert metrics["label_accuracy_before_abstention"] == pytest.approx(2 / 6)
    # answered and wrong: coverage 4/6, selective accuracy 2/4
    assert (metrics["coverage"], metrics["selective_accuracy"]) == (pytest.approx(4 / 6), pytest.approx(2 / 4))
    # no confidence: the calibration numbers stay over the five claims that have one
    assert metrics["brier"] == pytest.approx(0.67 / 5)
    assert metrics["outcomes"]["error"] == 1


def test_errors_are_counted_per_source() -> None:
    metrics = evaluate([*RECORDS, record("8", S, S, False, 0.9, 0.9, source="b")], [{**ERROR, "source": "b"}])
    assert metrics["n_errors"] == 1 and metrics["by_source"]["a"]["n_errors"] == 0
    assert metrics["by_source"]["b"]["n"] == 2 and metrics["by_source"]["b"]["n_errors"] == 1
    assert metrics["by_source"]["b"]["accuracy"] == pytest.approx(1 / 2)
    only_errors = evaluate([], [ERROR])
    assert only_errors["n"] == 1 and only_errors["accuracy"] == 0.0 and only_errors["brier"] is None


def test_eval_r2vc_command_counts_error_records(tmp_path: Path) -> None:
    from veracity import cli

    path = tmp_path / "records.jsonl"
    lines = [{"id": r["id"], "status": "ok", "seconds": 0.1, "result": r} for r in RECORDS] + [ERROR]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli.main(["eval", "r2vc", "--predictions", str(path), "--output_dir", str(tmp_path / "o"),
                     "--plots", "false"]) == 0
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert (metrics["n"], metrics["n_errors"], metrics["errors"]) == (6, 1, 1)
    assert metrics["accuracy"] == pytest.approx(3 / 6)
    assert "error 1" in (tmp_path / "o" / "report.md").read_text()


@pytest.fixture(scope="module")
def tiny_verifier(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    from tiny_models import build_tiny_nli

    return build_tiny_nli(tmp_path_factory.mktemp("tiny_verifier"), tiny_encoder_dir,
                          {0: "entailment", 1: "neutral", 2: "contradiction"}, veracity_max_length=48,
                          veracity_evidence_titles=False)


def test_infer_r2vc_counts_a_claim_the_pipeline_raised_on(tiny_verifier: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the command: the error record keeps the claim's gold label, so the scorer counts it wrong."""
    from veracity import cli
    from veracity.infer.pipelines.r2vc.pipeline import R2VCPipeline

    original = R2VCPipeline.__call__

    def failing(self, items):  # noqa: ANN001, ANN202
        if any(item["id"] == "b" for item in items):
            raise RuntimeError("retrieval went away")
        return original(self, items)

    monkeypatch.setattr(R2VCPipeline, "__call__", failing)
    claims = tmp_path / "claims.jsonl"
    claims.write_text("".join(json.dumps(row) + "\n" for row in [
        {"id": "a", "claim": "Cats purr.", "evidence": "Cats purr when content.", "label": "supports"},
        {"id": "b", "claim": "Dogs bark.", "evidence": "Dogs bark at night.", "label": "supports"}]))
    out = tmp_path / "out"
    assert cli.main(["infer", "r2vc", "--claims", str(claims), "--use_generator", "false", "--nli_model",
                     str(tiny_verifier), "--output_dir", str(out), "--progress", "false"]) == 1  # a claim failed
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [(r["id"], r["status"], r.get("gold")) for r in records if r["status"] == "error"] == [
        ("b", "error", S)]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["n"], metrics["n_errors"], metrics["errors"]) == (2, 1, 1)
    assert metrics["accuracy"] <= 0.5 and metrics["confusion"][S]["(none)"] == 1


# --- issue 44, item 3: a lone surrogate survives every writer ---------------------------------------------------

HALF = "half an emoji: \ud83d"  # what a corpus document's JSON escape "\ud83d" gives


class SurrogateAnswers:
    """R2VC's generator, scripted: a parsable answer whose rationale ends in a lone surrogate."""

    kind = "scripted"
    model_id = "surrogate"
    identity = "scripted:surrogate"

    def decoding(self, kinds=("json_schema",)) -> dict:
        return {"constrained": bool(kinds), "logprob_definition": None}

    def generate(self, requests):
        from veracity.models.engine import Candidate, GenerationResult

        answer = json.dumps({"label": "SUPPORTS", "rationale": HALF, "evidence_ids": [1]})
        return [GenerationResult([Candidate(answer, "stop", [-0.1])]) for _ in requests]

    def close(self) -> None:
        pass


def test_a_lone_surrogate_survives_every_file_of_infer_and_eval_r2vc(tiny_verifier: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import veracity.infer.pipelines.r2vc.pipeline as r2vc
    from veracity import cli

    monkeypatch.setattr(r2vc, "make_engine", lambda config: SurrogateAnswers())
    claims = tmp_path / "claims.jsonl"  # json.dumps writes the surrogate as its escape, as a corpus file does
    claims.write_text(json.dumps({"id": "c\ud83d", "claim": "Cats purr.", "evidence": [f"Cats purr. {HALF}"],
                                  "label": "SUPPORTS"}) + "\n")
    run, scored = tmp_path / "run", tmp_path / "scored"
    cli.main(["infer", "r2vc", "--claims", str(claims), "--nli_model", str(tiny_verifier), "--n_candidates", "1",
              "--cache", "", "--output_dir", str(run), "--progress", "false"])
    cli.main(["eval", "r2vc", "--predictions", str(run / "records.jsonl"), "--output_dir", str(scored)])
    files = sorted(p for p in [*run.rglob("*"), *scored.rglob("*")] if p.is_file() and p.suffix != ".png")
    names = {p.name for p in files}
    assert {"records.jsonl", "predictions.jsonl", "metrics.json", "summary.json", "report.md", "report.html",
            "run_config.yaml"} <= names, names
    for path in files:
        text = path.read_bytes().decode("utf-8")  # strict: every file is UTF-8
        if path.suffix == ".jsonl":  # the texts read back the same, the surrogate included
            rows = [json.loads(line) for line in text.splitlines()]
            result = [row.get("result", row) for row in rows][0]
            assert result["id"] == "c\ud83d" and result["candidates"][0]["rationale"] == HALF, path
            assert result["passages"][0]["text"] == f"Cats purr. {HALF}", path
        elif path.suffix == ".json":
            json.loads(text)
    assert "half an emoji: \\ud83d" in (run / "report.html").read_text(encoding="utf-8")  # shown as the escape
    metrics = json.loads((scored / "metrics.json").read_text())
    assert metrics["n"] == 1 and json.loads((run / "metrics.json").read_text())["n"] == 1


def test_the_share_of_answers_in_the_trained_quote_format_by_hand() -> None:
    from veracity.infer.pipelines.r2vc.prompt import grounded_rationale, keeps_quote_format

    def candidate(rationale: str, label: str | None = S, source: str = "generator") -> dict:
        # the pipeline records whether an answer keeps the format; the scorer only counts (it reads records alone)
        return {"from": source, "label": label, "rationale": rationale,
                "quote_format": keeps_quote_format(rationale)}

    trained = grounded_rationale(S, 'The bridge is "long".', 1)
    claim = {**RECORDS[0], "candidates": [candidate(trained), candidate("It is long."),
                                          candidate("", None), candidate("", S, "nli")]}
    other = {**RECORDS[3], "candidates": [candidate(grounded_rationale(N, "x " * 300, 2))]}
    # parsed generator answers: 3 (the unparsed one and the verifier's candidate do not count); 2 in the format
    assert evaluate([claim, other])["quote_format_rate"] == pytest.approx(2 / 3)
    assert evaluate(RECORDS)["quote_format_rate"] is None  # no generator answer at all


def test_records_made_before_quote_format_was_recorded_are_read_from_their_rationale(tmp_path: Path) -> None:
    """A record of an older run has no ``quote_format`` on its candidates: the scorer reads the rationale, so the
    same answers score the same (not 0.0); a recorded value still wins."""
    from veracity.infer.pipelines.r2vc.prompt import grounded_rationale

    trained, plain = grounded_rationale(S, "The bridge is long.", 1), "It is long."
    old = {**RECORDS[0], "candidates": [{"from": "generator", "label": S, "rationale": r} for r in (trained, plain)]}
    assert evaluate([old])["quote_format_rate"] == pytest.approx(1 / 2)
    recorded = {**old, "candidates": [{**c, "quote_format": False} for c in old["candidates"]]}
    assert evaluate([recorded])["quote_format_rate"] == 0.0
    (tmp_path / "records.jsonl").write_text(json.dumps({"id": "1", "status": "ok", "result": old}) + "\n")
    from veracity import cli

    assert cli.main(["eval", "r2vc", "--predictions", str(tmp_path / "records.jsonl"), "--output_dir",
                     str(tmp_path), "--plots", "false"]) == 0
    assert json.loads((tmp_path / "metrics.json").read_text())["quote_format_rate"] == pytest.approx(1 / 2)


def test_unlabelled_claims_are_counted_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Your own claims need no label: those without one are not scored, and the metrics (``n_unlabelled``), the
    printed summary and report.md say how many and which (the first five by id)."""
    from veracity import cli

    rows = [*RECORDS[:3], *(record(f"u{k}", None, S, False, 0.9, 0.8) for k in range(7))]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps({"id": r["id"], "status": "ok", "result": r}) + "\n" for r in rows))
    capsys.readouterr()
    assert cli.main(["eval", "r2vc", "--predictions", str(path), "--output_dir", str(tmp_path), "--plots", "false"]) \
        == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["n"], metrics["n_unlabelled"]) == (3, 7)
    line = "n_unlabelled 7: claims without a gold label, not scored (u0, u1, u2, u3, u4 and 2 more)"
    assert line in capsys.readouterr().out.splitlines()
    assert line in (tmp_path / "report.md").read_text().splitlines()
