"""R2VC pure parts: signals and s_ver on hand-made NLI outputs, abstention boundaries, the calibrator as a model,
risk control's guarantee on synthetic data, and the selective metrics against scikit-learn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from veracity.infer.pipelines.r2vc.signals import (
    SignalSettings,
    abstain,
    alignment,
    candidate_features,
    candidate_signals,
    citation_similarity,
    claim_signals,
    consistency,
    feature_names,
    nli_label,
)

S = SignalSettings()
CLAIM = "The bridge is 120 metres long"
PASSAGES = ["The bridge is 120 metres long and opened in 1990.", "It crosses a river.", "Tolls were dropped."]
# rows: entailment, neutral, contradiction
NLI = np.array([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])


def test_claim_signals_and_coverage_top_six() -> None:
    s_ent, s_contr, s_cov, y = claim_signals(NLI, S)
    assert (s_ent, s_contr, y) == (0.8, 0.4, "True")
    assert s_cov == pytest.approx((0.8 + 0.1 + 0.3) / 3)
    eight = np.column_stack([np.linspace(0.9, 0.2, 8), np.zeros(8), 1 - np.linspace(0.9, 0.2, 8)])
    assert claim_signals(eight, S)[2] == pytest.approx(np.linspace(0.9, 0.2, 8)[:6].mean())  # top 6 of 8
    assert claim_signals(np.zeros((0, 3)), S) == (0.0, 0.0, 0.0, "Uncertain")


@pytest.mark.parametrize(("s_ent", "s_contr", "expected"), [
    (0.60, 0.50, "True"),      # both boundaries exactly: T_ent and the margin δ
    (0.59, 0.10, "Uncertain"),  # below T_ent
    (0.65, 0.56, "Uncertain"),  # margin 0.09 < δ
    (0.40, 0.70, "False"),
    (0.50, 0.60, "False"),      # T_contr and δ exactly
])
def test_nli_label_thresholds(s_ent: float, s_contr: float, expected: str) -> None:
    assert nli_label(s_ent, s_contr, S) == expected


def test_consistency_table() -> None:
    assert consistency("SUPPORTS", "True") == consistency("REFUTES", "False") == consistency(
        "NOT ENOUGH INFO", "Uncertain") == 1.0
    assert consistency("SUPPORTS", "False") == consistency("REFUTES", "True") == 0.0
    assert consistency("SUPPORTS", "Uncertain") == consistency("NOT ENOUGH INFO", "True") == 0.5


def test_citation_similarity_words_and_numbers() -> None:
    assert citation_similarity(CLAIM, PASSAGES[0]) == pytest.approx(1.0)
    # words all there, the number wrong: half of the score is the numeric match
    assert citation_similarity(CLAIM, "The bridge is 95 metres long.") == pytest.approx(0.5 * 1.0 + 0.5 * 0.0)
    assert citation_similarity("Dogs bark", "Cats purr") == 0.0


def test_alignment_is_jaccard_with_top_entailment() -> None:
    assert alignment([1], NLI[:, 0]) == 1.0
    assert alignment([2], NLI[:, 0]) == 0.0
    assert alignment([1, 2], NLI[:, 0]) == pytest.approx(1 / 3)  # top-2 = {1, 3}
    assert alignment([], NLI[:, 0]) == 0.0 and alignment([9], NLI[:, 0]) == 0.0


def test_s_ver_by_hand_claim_orientation() -> None:
    claim_view = SignalSettings(orientation="claim")
    sig = candidate_signals(NLI, "SUPPORTS", [1], CLAIM, PASSAGES, claim_view)
    s_cov = (0.8 + 0.1 + 0.3) / 3
    expected = 0.6 * 0.8 + 0.2 * s_cov - 0.3 * 0.0 + 0.1 * 1.0 + 0.1 * 1.0 - 0.1 * (1 - 1.0)
    assert sig.s_ver == pytest.approx(expected) and sig.s_cit == pytest.approx(1.0)
    # A REFUTES answer read the literal way (docs/design.md#r2vc-decisions): contradiction is not its support, s_cons 0
    # against y_NLI True.
    refutes = candidate_signals(NLI, "REFUTES", [3], CLAIM, PASSAGES, claim_view)
    cit = citation_similarity(CLAIM, PASSAGES[2])
    expected = 0.6 * 0.8 + 0.2 * s_cov - 0.0 + 0.1 * 0.0 + 0.1 * 0.0 - 0.1 * (1 - cit)
    assert refutes.s_ver == pytest.approx(expected)


def test_s_ver_by_hand_verdict_orientation() -> None:
    contradicted = np.array([[0.05, 0.15, 0.8], [0.1, 0.8, 0.1]])
    sig = candidate_signals(contradicted, "REFUTES", [1], CLAIM, PASSAGES[:2], S)
    assert (sig.s_ent, sig.s_contr, sig.y_nli, sig.s_cons, sig.s_align) == (0.8, 0.1, "False", 1.0, 1.0)
    expected = 0.6 * 0.8 + 0.2 * (0.8 + 0.1) / 2 - 0.3 * 0.0 + 0.1 + 0.1 - 0.1 * (1 - sig.s_cit)
    assert sig.s_ver == pytest.approx(expected)
    nei = candidate_signals(np.array([[0.1, 0.8, 0.1]]), "NOT ENOUGH INFO", [], CLAIM, PASSAGES[:1], S)
    assert nei.s_ent == pytest.approx(0.9) and nei.s_contr == pytest.approx(0.1)  # 1 − strongest settling passage


def test_features_and_names() -> None:
    sig = candidate_signals(NLI, "SUPPORTS", [1], CLAIM, PASSAGES, S)
    row = candidate_features(sig, "SUPPORTS", ["SUPPORTS", "SUPPORTS", "REFUTES", "SUPPORTS"], [1, 1],
                             "Passage one says so .", -0.5)
    assert row["label_agreement"] == 0.75 and row["passages_used"] == 1.0 and row["rationale_tokens"] == 5.0
    assert row["mean_logprob"] == -0.5 and row["from_nli"] == 0.0
    assert feature_names(logprobs=False, nli_candidate=False) == [
        "s_ver", "label_agreement", "passages_used", "rationale_tokens", "s_cons", "s_align"]
    assert feature_names(True, True)[0] == "mean_logprob" and feature_names(True, True)[-1] == "from_nli"


def test_abstention_boundaries() -> None:
    assert abstain(0.55, 0.60, 0.55, 0.60) is None  # exactly at both thresholds: answer
    assert "tau_ver" in abstain(0.5499, 0.99, 0.55, 0.60)
    assert "tau_cal" in abstain(0.9, 0.5999, 0.55, 0.60)
    assert abstain(0.0, 0.0, None, None) is None


# --- calibrator -------------------------------------------------------------------------------------------

def test_calibrator_round_trip_and_feature_check(tmp_path: Path) -> None:
    from veracity.models.calibrator import CalibratorFeatureError, LogisticCalibrator

    calibrator = LogisticCalibrator(["s_ver", "s_cons"], [2.0, -1.0], 0.5, risk_control={"tau_cal": 0.7})
    path = calibrator.save(tmp_path / "calibrator.json")
    loaded = LogisticCalibrator.load(tmp_path)
    assert loaded == calibrator and json.loads(path.read_text())["format"].startswith("veracity-logistic")
    p = loaded.predict_proba([{"s_ver": 1.0, "s_cons": 0.5, "extra": 3.0}])
    assert p[0] == pytest.approx(1 / (1 + np.exp(-(0.5 + 2.0 - 0.5))))
    with pytest.raises(CalibratorFeatureError, match="needs \\['s_cons'\\]"):
        loaded.predict_proba([{"s_ver": 1.0}])
    with pytest.raises(CalibratorFeatureError, match="columns"):
        loaded.predict_proba(np.zeros((2, 3)))
    path.write_text(json.dumps({"format": "pickle?"}))
    with pytest.raises(ValueError, match="field 'format'"):
        LogisticCalibrator.load(path)


def test_a_calibrator_fit_on_the_old_features_is_refused(tmp_path: Path) -> None:
    from veracity.models.calibrator import LogisticCalibrator

    path = LogisticCalibrator(["s_ver"], [1.0], 0.0).save(tmp_path / "calibrator.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": "veracity-logistic-calibrator/1"}))
    with pytest.raises(ValueError, match="older definition of the features.*refit"):
        LogisticCalibrator.load(path)


def test_folded_weights_predict_as_scikit_learn_does_on_standardised_inputs() -> None:
    from sklearn.linear_model import LogisticRegression

    from veracity.train.calibrator import fit_logistic

    rng = np.random.default_rng(5)
    # features far from unit scale (log-probs, s_ver, token counts), so the folded standardisation matters
    x = np.column_stack([rng.normal(-1.5, 0.4, 300), rng.normal(0.6, 0.1, 300), rng.integers(1, 40, 300)])
    y = rng.random(300) < 1 / (1 + np.exp(-(3 * (x[:, 0] + 1.5) - 10 * (x[:, 1] - 0.6) + 0.05 * (x[:, 2] - 20))))
    names = ["mean_logprob", "s_ver", "rationale_tokens"]
    calibrator = fit_logistic(x, y, names, c=1.0)
    standardised = (x - x.mean(0)) / x.std(0)
    reference = LogisticRegression(C=1.0, max_iter=1000).fit(standardised, y).predict_proba(standardised)[:, 1]
    np.testing.assert_allclose(calibrator.predict_proba(x), reference, rtol=1e-9, atol=1e-12)
    rows = [dict(zip(names, row, strict=True)) for row in x[:5].tolist()]  # the dict path inference uses
    np.testing.assert_allclose(calibrator.predict_proba(rows), reference[:5], rtol=1e-9, atol=1e-12)


def test_fit_calibrator_lowers_ece_on_miscalibrated_synthetic_records() -> None:
    from veracity.train.calibrator import CalibratorArgs, fit_calibrator

    rng = np.random.default_rng(0)
    records = []
    for i in range(400):  # s_ver says 0.9 for everything, but only those with s_cons 1 are right
        cons = float(rng.random() < 0.5)
        right = rng.random() < (0.95 if cons else 0.25)
        label = "SUPPORTS" if right else "REFUTES"
        features = {"s_ver": 0.9, "s_cons": cons}
        records.append({"id": f"c{i}", "gold": "SUPPORTS", "candidates": [
            {"label": label, "features": features, "signals": {"s_ver": 0.9}}]})
    calibrator, metrics = fit_calibrator(records, ["s_ver", "s_cons"], CalibratorArgs(), seed=1, target_risk=0.3)
    assert metrics["holdout_ece"] < metrics["holdout_ece_uncalibrated"] - 0.2
    assert calibrator.coefficients[1] > 0  # consistency raises confidence
    assert calibrator.risk_control["tau_cal"] is not None and len(calibrator.risk_control["holdout_correct"]) > 50
    by_target = metrics["risk_control_by_target"]
    assert set(by_target) == {"0.05", "0.1", "0.2", "0.3"}
    assert by_target["0.3"]["tau_cal"] == calibrator.risk_control["tau_cal"]
    certified = [by_target[t] for t in ("0.05", "0.1", "0.2", "0.3") if by_target[t]["tau_cal"] is not None]
    assert certified and all(r["selective_risk"] <= 0.3 for r in certified)
    coverages = [by_target[t]["coverage"] for t in ("0.05", "0.1", "0.2", "0.3")]
    assert coverages == sorted(coverages)  # a looser target never certifies less


# --- risk control -----------------------------------------------------------------------------------------

def test_risk_control_guarantee_holds_on_synthetic_exchangeable_data() -> None:
    from veracity.infer.pipelines.r2vc.risk_control import risk_controlled_threshold

    rng = np.random.default_rng(7)
    target, delta, trials, violations, coverages, realised = 0.10, 0.10, 300, 0, [], []
    for _ in range(trials):
        conf = rng.random(2500)
        correct = rng.random(2500) < 0.5 + 0.5 * conf  # P(correct | p) = (1 + p) / 2: errors fall as p rises
        chosen = risk_controlled_threshold(conf[:500], correct[:500], target, delta)
        test_conf, test_correct = conf[500:], correct[500:]
        if chosen["tau_cal"] is None:
            continue
        answered = test_conf >= chosen["tau_cal"]
        # the true selective risk at the threshold (closed form), not its noisy test estimate
        tau = chosen["tau_cal"]
        true_risk = 0.5 - 0.25 * (1 + tau)  # E[(1 − p)/2 | p ≥ τ] with p ~ U(0, 1)
        violations += true_risk > target
        coverages.append(answered.mean())
        realised.append(1 - test_correct[answered].mean())
    assert violations / trials <= delta  # the guarantee: P(risk > target) ≤ δ
    # Not trivially abstaining everywhere: the oracle threshold (risk 0.1 ⇔ τ = 0.6) answers 40%; 500 calib claims
    # certify about 15–20% (the price of a finite-sample guarantee).
    assert len(coverages) > 0.7 * trials and np.mean(coverages) > 0.1
    assert np.mean(realised) < target and np.mean(np.asarray(realised) > target) <= delta  # on the held-out claims


def test_risk_control_abstains_everywhere_when_nothing_can_be_certified() -> None:
    from veracity.infer.pipelines.r2vc.risk_control import risk_controlled_threshold

    chosen = risk_controlled_threshold([0.9, 0.8, 0.7], [False, False, True], 0.1, 0.1)
    assert chosen["tau_cal"] is None and chosen["coverage"] == 0.0
    assert chosen["selective_risk"] is None  # undefined, not a perfect 0.0


# --- selective metrics ------------------------------------------------------------------------------------

def test_selective_metrics_against_hand_values_and_sklearn() -> None:
    from sklearn.metrics import brier_score_loss, f1_score

    from veracity.infer.metrics import aurc, binary_brier, macro_f1, risk_coverage, selective_metrics

    conf, right = [0.9, 0.8, 0.6, 0.3], [True, False, True, False]
    coverage, risk = risk_coverage(conf, right)
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0.0, 0.5, 1 / 3, 0.5])
    assert aurc(conf, right) == pytest.approx((0 + 0.5 + 1 / 3 + 0.5) / 4)
    assert binary_brier(conf, right) == pytest.approx(brier_score_loss(right, conf))
    assert selective_metrics([True, True, False, False], right) == {
        "coverage": 0.5, "answered": 2, "selective_accuracy": 0.5, "selective_risk": 0.5}
    # nothing answered: the selective numbers are undefined, and the report shows them as such
    from veracity.infer.eval.r2vc import table_cell

    nothing = selective_metrics([False] * 4, right)
    assert nothing == {"coverage": 0.0, "answered": 0, "selective_accuracy": None, "selective_risk": None}
    assert [table_cell(nothing[k]) for k in ("coverage", "selective_accuracy")] == ["0.000", "–"]
    gold = ["SUPPORTS", "REFUTES", "SUPPORTS", "NOT ENOUGH INFO"]
    pred = ["SUPPORTS", "SUPPORTS", "NOT ENOUGH INFO", "NOT ENOUGH INFO"]
    labels = ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]
    assert macro_f1(gold, pred, labels) == pytest.approx(f1_score(gold, pred, labels=labels, average="macro",
                                                                  zero_division=0))


def test_ece_matches_scikit_learn_calibration_curve() -> None:
    from sklearn.calibration import calibration_curve

    from veracity.infer.metrics import expected_calibration_error

    rng = np.random.default_rng(3)
    conf = rng.random(500) * 0.98 + 0.01
    right = rng.random(500) < conf ** 2
    true, predicted = calibration_curve(right, conf, n_bins=10, strategy="uniform")
    counts = np.histogram(conf, bins=np.linspace(0, 1, 11))[0]
    expected = float(np.sum(counts[counts > 0] / len(conf) * np.abs(true - predicted)))
    assert expected_calibration_error(conf, right) == pytest.approx(expected)
