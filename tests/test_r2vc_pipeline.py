"""The R2VC pipeline end to end on tiny models: output schema, defined outcomes, the command line and the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from sklearn.metrics import accuracy_score, f1_score

from veracity.data_prep.schema import TERNARY_LABELS
from veracity.infer.pipelines.r2vc.config import R2VCConfig
from veracity.infer.pipelines.r2vc.pipeline import decide
from veracity.infer.pipelines.r2vc.prompt import format_answer
from veracity.infer.pipelines.r2vc.signals import SignalSettings
from veracity.models.engine import LOGPROB_DEFINITION, Candidate, GenerationResult

RECORD_KEYS = {"id", "source", "claim", "gold", "passages", "nli", "claim_signals", "generation_error", "candidates",
               "outcome", "chosen", "label", "prediction", "abstained", "abstain_reason", "confidence",
               "confidence_uncalibrated"}


@pytest.fixture(scope="module")
def tiny_verifier(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    from tiny_models import build_tiny_nli

    # a small max_length, so a long passage must be windowed
    return build_tiny_nli(tmp_path_factory.mktemp("tiny_verifier"), tiny_encoder_dir,
                          {0: "entailment", 1: "neutral", 2: "contradiction"}, veracity_max_length=48,
                          veracity_evidence_titles=False)


def _result(*texts: str, logprob: float = -0.2) -> GenerationResult:
    return GenerationResult([Candidate(t, "stop", token_logprobs=[logprob, logprob]) for t in texts])


ITEM = {"id": "x", "claim": "The bridge is 120 metres long", "gold": "SUPPORTS", "source": "t",
        "passages": [{"text": "The bridge is 120 metres long."}, {"text": "It opened in 1990."}]}
NLI = np.array([[0.9, 0.05, 0.05], [0.2, 0.7, 0.1]])


def test_decide_picks_the_most_confident_parsed_candidate_and_keeps_failures() -> None:
    config = R2VCConfig(tau_ver=0.0, calibrator=None)
    result = _result(format_answer("SUPPORTS", "Passage 1 says so.", [1]), "not json at all",
                     format_answer("REFUTES", "No.", [2]))
    record = decide(ITEM, NLI, result, config, SignalSettings(), None)
    assert RECORD_KEYS <= set(record)
    assert record["label"] == record["prediction"] == "SUPPORTS" and record["outcome"] == "answered"
    failed = record["candidates"][1]
    assert failed["label"] is None and failed["parse_error"].startswith("no_json_object") and "signals" not in failed
    chosen = record["candidates"][record["chosen"]]
    assert chosen["confidence"] == max(c["confidence"] for c in record["candidates"] if c["label"])
    assert set(chosen["signals"]) == {"s_ent", "s_contr", "s_cov", "s_cit", "y_nli", "s_cons", "s_align", "s_ver"}


def test_decide_defined_outcomes() -> None:
    settings = SignalSettings()
    no_evidence = decide({**ITEM, "passages": []}, np.zeros((0, 3)), None, R2VCConfig(), settings, None)
    assert (no_evidence["outcome"], no_evidence["prediction"], no_evidence["abstained"]) == (
        "no_evidence", "NOT ENOUGH INFO", True)
    garbage = decide(ITEM, NLI, _result("??", "still not json"), R2VCConfig(nli_candidate=False), settings, None)
    assert garbage["outcome"] == "no_parsable_candidate" and garbage["abstained"]
    assert [c["parse_error"] is not None for c in garbage["candidates"]] == [True, True]
    rescued = decide(ITEM, NLI, _result("??"), R2VCConfig(nli_candidate=True, tau_ver=0.0), settings, None)
    assert rescued["candidates"][rescued["chosen"]]["from"] == "nli" and rescued["label"] == "SUPPORTS"
    overflow = decide(ITEM, NLI, GenerationResult(error="context_overflow: too long"), R2VCConfig(nli_candidate=True,
                      tau_ver=0.0), settings, None)
    assert overflow["generation_error"].startswith("context_overflow") and overflow["label"] == "SUPPORTS"


def test_decide_abstains_on_low_verifier_score_and_uses_the_calibrator() -> None:
    from veracity.models.calibrator import LogisticCalibrator

    result = _result(format_answer("SUPPORTS", "Passage 1 says so.", [1]))
    low = decide(ITEM, np.array([[0.3, 0.4, 0.3]] * 2), result, R2VCConfig(), SignalSettings(), None)
    assert low["abstained"] and "tau_ver" in low["abstain_reason"] and low["outcome"] == "abstained"
    # the candidate's label is kept for inspection; what the claim is answered with is NOT ENOUGH INFO
    assert (low["label"], low["prediction"]) == ("SUPPORTS", "NOT ENOUGH INFO")
    unsure = LogisticCalibrator(["s_ver"], [0.0], -1.0)  # always p = σ(−1) ≈ 0.27 < τ_cal
    record = decide(ITEM, NLI, result, R2VCConfig(calibrator="c.json"), SignalSettings(), unsure)
    assert record["abstained"] and "tau_cal" in record["abstain_reason"] and record["outcome"] == "abstained"
    assert (record["label"], record["prediction"]) == ("SUPPORTS", "NOT ENOUGH INFO")
    assert record["confidence"] == pytest.approx(1 / (1 + np.e))


def test_pipeline_run_on_tiny_models(prepared_dir: Path, tiny_lm_dir: Path, tiny_verifier: Path,
                                     tmp_path: Path) -> None:
    from veracity.infer.pipelines.r2vc.run import main

    out = tmp_path / "run"
    argv = ["--prepared_dir", str(prepared_dir), "--sources", "fever_symmetric", "vitaminc", "--split", "dev",
            "--max_examples", "3", "--model", str(tiny_lm_dir), "--nli_model", str(tiny_verifier),
            "--n_candidates", "2", "--rationale_max_chars", "12", "--nli_candidate", "true", "--output_dir", str(out),
            "--progress", "false", "--cache", str(tmp_path / "cache.sqlite")]
    report = main(argv)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 6 and all(r["status"] == "ok" for r in records)
    for row in records:
        record = row["result"]
        assert RECORD_KEYS <= set(record)
        assert len(record["candidates"]) == 3  # 2 sampled (constrained: each a parsed answer) + the NLI one
        assert all(c["label"] in TERNARY_LABELS and c["parse_error"] is None for c in record["candidates"][:2])
        assert record["candidates"][-1]["from"] == "nli" and record["passages"]
        assert np.allclose(np.sum(record["nli"], axis=1), 1.0)
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("n", "accuracy", "macro_f1", "brier", "ece", "ece_uncalibrated", "coverage", "selective_accuracy",
                "aurc"):
        assert key in metrics
    assert metrics["n"] == 6 and metrics["parse_failure_rate"] == 0.0  # constrained, the tiny model always answers
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert all({"id", "gold", "prediction", "abstained", "confidence"} <= set(r) for r in rows)
    gold, predicted = [r["gold"] for r in rows], [r["prediction"] for r in rows]
    assert metrics["accuracy"] == pytest.approx(accuracy_score(gold, predicted))
    assert metrics["macro_f1"] == pytest.approx(f1_score(gold, predicted, labels=list(TERNARY_LABELS),
                                                         average="macro", zero_division=0))
    # with --cache this reads the cache wrapper's decoding(); the engine's own, uncached, is asserted in
    # test_r2vc_run.py::test_a_calibrator_fit_with_logprobs_names_its_decoding_and_refuses_another
    decoding = yaml.safe_load((out / "run_config.yaml").read_text())["decoding"]
    assert decoding["constrained"] is True and decoding["logprob_definition"] == LOGPROB_DEFINITION
    assert (out / "risk_coverage.png").stat().st_size > 1000 and (out / "reliability.png").stat().st_size > 1000
    assert "accuracy" in (out / "report.md").read_text()
    assert set(report["seconds_per_stage"]) == {"retrieval", "generation", "verifier", "decision"}
    again = main(argv)  # resumes: nothing to do
    assert again["already_done"] == 6 and again["processed"] == 0
    kept = json.loads((out / "summary.json").read_text())  # the timings of the run that did the work survive
    assert kept["processed"] == 6 and kept["seconds_per_stage"] == report["seconds_per_stage"]


def test_user_claims_file_and_long_evidence_is_windowed(tiny_lm_dir: Path, tiny_verifier: Path,
                                                        tmp_path: Path) -> None:
    from veracity.infer.pipelines.r2vc.run import main

    long_passage = " ".join(f"Fact {i}: the tower is {i} metres tall." for i in range(20))
    claims = tmp_path / "claims.jsonl"
    claims.write_text(json.dumps({"id": "a", "claim": "The tower is 19 metres tall.", "evidence": long_passage}) + "\n"
                      + json.dumps({"id": "b", "claim": "Cats purr.", "evidence": ["Cats purr when content."],
                                    "label": "supports"}) + "\n")
    report = main(["--claims", str(claims), "--model", str(tiny_lm_dir), "--nli_model", str(tiny_verifier),
                   "--n_candidates", "1", "--max_new_tokens", "4", "--output_dir", str(tmp_path / "out"),
                   "--progress", "false"])
    assert report["verifier"]["windowed"] == 1 and report["verifier"]["windows"] > 1
    assert report["metrics"]["n"] == 1 and report["metrics"]["n_unlabelled"] == 1


def test_resume_refuses_records_made_under_other_settings_or_weights(tiny_verifier: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from veracity import cli

    verifier = tmp_path / "verifier"
    shutil.copytree(tiny_verifier, verifier)
    claims = tmp_path / "claims.jsonl"
    claims.write_text(json.dumps({"id": "a", "claim": "Cats purr.", "evidence": "Cats purr when content."}) + "\n")
    out = tmp_path / "out"
    argv = ["infer", "r2vc", "--claims", str(claims), "--use_generator", "false", "--nli_model", str(verifier),
            "--output_dir", str(out), "--progress", "false"]
    cli.main(argv)
    records, record = (out / "records.jsonl").read_text(), (out / "run_config.yaml").read_text()
    assert f"verifier: {verifier}#" in record  # the record names the verifier by content
    cli.main([*argv, "--claims_per_call", "2", "--nli_batch_size", "4"])  # how fast: resumes
    assert (out / "records.jsonl").read_text() == records
    record = (out / "run_config.yaml").read_text()
    with pytest.raises(SystemExit) as info:
        cli.main([*argv, "--tau_ver", "0.3"])
    assert info.value.code == 2
    assert "tau_ver: 0.55 → 0.3" in capsys.readouterr().err
    config = json.loads((verifier / "config.json").read_text())
    (verifier / "config.json").write_text(json.dumps({**config, "note": "retrained"}))  # other weights, same path
    with pytest.raises(SystemExit):
        cli.main(argv)
    assert "models.verifier" in capsys.readouterr().err
    assert (out / "records.jsonl").read_text() == records and (out / "run_config.yaml").read_text() == record


def test_bad_claims_file_is_one_line_error_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           tiny_verifier: Path) -> None:
    from veracity import cli

    claims = tmp_path / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "ok", "evidence": "e"}\n{"id": "b", "claim": "", "evidence": "e"}\n')
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        cli.main(["infer", "r2vc", "--claims", str(claims), "--nli_model", str(tiny_verifier), "--output_dir",
                  str(out)])
    assert info.value.code == 2
    assert f"{claims}:2: field 'claim': missing or empty claim" in capsys.readouterr().err
    assert not out.exists()  # nothing written before the input is valid
    claims.write_text('{"id": "a", "claim": "ok"}\n')
    with pytest.raises(SystemExit):
        cli.main(["infer", "r2vc", "--claims", str(claims), "--output_dir", str(out)])
    assert "no evidence and no --index_dir" in capsys.readouterr().err


def test_eval_r2vc_rejects_a_torn_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from veracity import cli

    bad = tmp_path / "records.jsonl"
    bad.write_text('{"id": "a", "status": "ok", "result": {}}\n{"id": "b", "stat')
    with pytest.raises(SystemExit) as info:
        cli.main(["eval", "r2vc", "--predictions", str(bad), "--output_dir", str(tmp_path / "o")])
    assert info.value.code == 2 and f"{bad}:2: not an R2VC record" in capsys.readouterr().err


def test_generator_only_votes_and_never_abstains() -> None:
    result = _result(format_answer("REFUTES", "No.", [1]), format_answer("REFUTES", "No.", [1]),
                     format_answer("SUPPORTS", "Yes.", [1]))
    config = R2VCConfig(use_verifier=False, calibrator=None)
    record = decide(ITEM, NLI, result, config, SignalSettings(), None)  # the verifier says SUPPORTS: ignored
    assert record["label"] == "REFUTES" and not record["abstained"]
    assert record["confidence"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="generator-only"):
        R2VCConfig(use_verifier=False, nli_candidate=True)


def test_generator_only_breaks_vote_ties_by_its_own_logprob_never_the_verifier() -> None:
    config = R2VCConfig(use_verifier=False, calibrator=None)
    sure = GenerationResult([Candidate(format_answer("REFUTES", "No.", [1]), "stop", token_logprobs=[-0.1, -0.1]),
                             Candidate(format_answer("SUPPORTS", "Yes.", [1]), "stop", token_logprobs=[-2.0, -2.0])])
    # one vote each; the verifier (NLI: passage 1 entails the claim) would pick SUPPORTS, the log-probs REFUTES
    assert decide(ITEM, NLI, sure, config, SignalSettings(), None)["label"] == "REFUTES"
    flipped = GenerationResult(list(reversed(sure.candidates)))
    assert decide(ITEM, NLI, flipped, config, SignalSettings(), None)["label"] == "REFUTES"  # not the order either
    with_verifier = decide(ITEM, NLI, sure, R2VCConfig(calibrator=None, abstention="none"), SignalSettings(), None)
    assert with_verifier["label"] == "SUPPORTS"


def test_risk_control_threshold_comes_from_the_calibrators_held_out_scores() -> None:
    from veracity.infer.pipelines.r2vc.pipeline import thresholds
    from veracity.models.calibrator import LogisticCalibrator

    confident = [0.95] * 40 + [0.5] * 40  # 40 sure and right, 40 unsure and mostly wrong
    correct = [True] * 40 + [True] * 10 + [False] * 30
    calibrator = LogisticCalibrator(["s_ver"], [1.0], 0.0, risk_control={"holdout_confidence": confident,
                                                                         "holdout_correct": correct})
    assert thresholds(R2VCConfig(abstention="risk_control", calibrator="c.json", target_risk=0.1), calibrator) == (
        None, 0.95)
    tiny = LogisticCalibrator(["s_ver"], [1.0], 0.0, risk_control={"holdout_confidence": [0.9] * 5,
                                                                   "holdout_correct": [True] * 5})
    _, tau = thresholds(R2VCConfig(abstention="risk_control", calibrator="c.json"), tiny)
    assert tau == float("inf")  # 5 claims cannot certify a 10% risk: abstain on everything
    record = decide(ITEM, NLI, _result(format_answer("SUPPORTS", "Yes.", [1])),
                    R2VCConfig(abstention="risk_control", calibrator="c.json"), SignalSettings(), tiny)
    assert record["abstained"] and "tau_cal inf" in record["abstain_reason"]
    with pytest.raises(ValueError, match="held-out calib scores"):
        thresholds(R2VCConfig(abstention="risk_control", calibrator="c.json"), LogisticCalibrator(["s_ver"], [1.0], 0))


# --- issue 44, item 2: a schema-valid answer parses whatever its rationale quotes ------------------------------

QUOTING_RATIONALES = ["It says <think> there.", "see ```{}``` above", "a <think>x</think> b",
                      "```json\n{\"label\": \"REFUTES\"}\n``` quoted", "</think> then <think>"]


class QuotingEngine:
    """R2VC's generator, scripted: one schema-valid answer per rationale above, each quoting markup that the parser
    must read as text (a passage quoted in a rationale can hold any of it)."""

    kind = "scripted"
    model_id = "quoting"
    identity = "scripted:quoting"

    def decoding(self, kinds=("json_schema",)) -> dict:
        return {"constrained": bool(kinds), "logprob_definition": None}

    def generate(self, requests):
        answers = [format_answer("SUPPORTS", r, [1]) for r in QUOTING_RATIONALES]
        return [GenerationResult([Candidate(a, "stop", [-0.1]) for a in answers]) for _ in requests]

    def close(self) -> None:
        pass


def test_rationales_quoting_reasoning_tags_and_fences_parse_verbatim_through_infer_r2vc(
        tiny_verifier: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import veracity.infer.pipelines.r2vc.pipeline as r2vc
    from veracity import cli

    monkeypatch.setattr(r2vc, "make_engine", lambda config: QuotingEngine())
    claims = tmp_path / "claims.jsonl"
    claims.write_text(json.dumps({"id": "a", "claim": "Cats purr.", "evidence": ["Cats purr."],
                                  "label": "SUPPORTS"}) + "\n")
    out = tmp_path / "run"
    cli.main(["infer", "r2vc", "--claims", str(claims), "--nli_model", str(tiny_verifier), "--n_candidates",
              str(len(QUOTING_RATIONALES)), "--cache", "", "--output_dir", str(out), "--progress", "false"])
    (row,) = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    generated = [c for c in row["result"]["candidates"] if c["from"] == "generator"]
    assert [(c["parse_error"], c["label"], c["rationale"]) for c in generated] == [
        (None, "SUPPORTS", r) for r in QUOTING_RATIONALES]
    assert json.loads((out / "metrics.json").read_text())["parse_failure_rate"] == 0.0


@pytest.mark.parametrize(("text", "value", "error"), [
    ('<think>weigh {"label": "REFUTES"}</think>{"label": "SUPPORTS", "r": "<think>"}', {"label": "SUPPORTS",
                                                                                         "r": "<think>"}, None),
    ('prose {"r": "```{}```"} then ```json\n{"label": "REFUTES"}\n```', {"label": "REFUTES"}, None),
    ('<think>still {"label": "SUPPORTS"', None, "unterminated_think"),
    ('{"label": "SUPPORTS", "r": "cut', None, "invalid_json"),
    ("no object at all", None, "no_json_object"),
])
def test_reasoning_blocks_and_fences_count_only_outside_json_strings(text: str, value: dict | None,
                                                                      error: str | None) -> None:
    from veracity.infer.parsing import extract_json_object

    result = extract_json_object(text)
    assert result.value == value and (result.error or "").split(":")[0] == (error or "")
