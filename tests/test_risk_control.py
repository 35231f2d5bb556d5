"""The calibrator's certificate: calib claims split three ways by claim group (fit / select C / certify), τ_cal
certified on claims used for nothing else, and the guarantee P(selective risk > target) ≤ δ re-checked through
that split over random draws and seeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from veracity.train.calibrator import CalibratorArgs, claim_groups, fit_calibrator, split_parts


def _record(record_id: str, claim: str, p: float, right: bool) -> dict:
    """One claim whose only candidate has s_ver = p (a calibrator on s_ver is monotone in it)."""
    label = "SUPPORTS" if right else "REFUTES"
    return {"id": record_id, "claim": claim, "gold": "SUPPORTS",
            "candidates": [{"label": label, "features": {"s_ver": p}, "signals": {"s_ver": p}}]}


def _contrastive(rng: np.random.Generator, cases: int) -> tuple[list[dict], dict[str, list[str]]]:
    """VitaminC-like cases: two claims with other texts sharing a case id; P(correct | p) = (1 + p) / 2."""
    from veracity.data_prep.splits import claim_key, group_key

    records, groups = [], {}
    for case in range(cases):
        for n in (1, 2):
            record_id, claim = f"vitaminc/vitc-case{case}_{n}", f"Claim {n} of case {case} ."
            p = float(rng.random())
            records.append(_record(record_id, claim, p, bool(rng.random() < (1 + p) / 2)))
            groups[record_id] = [claim_key(claim), group_key("vitaminc", f"case{case}")]
    return records, groups


def test_parts_are_whole_claim_groups_and_disjoint() -> None:
    records, groups = _contrastive(np.random.default_rng(0), 300)
    parts = split_parts(records, CalibratorArgs(), groups)
    where = {r["id"]: part for part, rs in parts.items() for r in rs}
    assert len(where) == len(records) and all(parts.values())
    for case in range(300):  # contrastive partners never straddle two parts
        assert where[f"vitaminc/vitc-case{case}_1"] == where[f"vitaminc/vitc-case{case}_2"]
    sizes = {part: len(rs) / len(records) for part, rs in parts.items()}
    assert sizes["fit"] == pytest.approx(0.5, abs=0.08) and sizes["select"] == pytest.approx(0.2, abs=0.06)
    assert sizes["certify"] == pytest.approx(0.3, abs=0.06)
    # without case ids, records with the same claim text (SufficientFacts' original / reduced) still go together
    same_claim = [_record(f"sf-{k}-{v}", f"Shared claim {k} .", 0.5, True) for k in range(50) for v in ("o", "r")]
    assigned = {r["id"]: part for part, rs in split_parts(same_claim, CalibratorArgs()).items() for r in rs}
    assert all(assigned[f"sf-{k}-o"] == assigned[f"sf-{k}-r"] for k in range(50))


def test_prepared_groups_join_vitaminc_partners(data_root: Path, tmp_path: Path) -> None:
    from veracity.data_prep.prepare import PrepConfig, prepare
    from veracity.infer.pipelines.r2vc.config import R2VCConfig
    from veracity.train.calibrator import prepared_groups

    prepare(PrepConfig(data_root=str(data_root), output_dir=str(tmp_path), datasets=["vitaminc"],
                       train_fraction=0.0, calib_fraction=1.0, dev_fraction=0.0))
    groups = prepared_groups(R2VCConfig(prepared_dir=str(tmp_path), sources=["vitaminc"]))
    pair = [{"id": "vitaminc/vitc-case1_1", "claim": "x"}, {"id": "vitaminc/vitc-case1_2", "claim": "y"}]
    assert set(groups) >= {r["id"] for r in pair}
    first, second = claim_groups(pair, groups)
    assert first == second  # partners with other claim texts: one group, through the case id


def test_tau_cal_is_certified_on_claims_that_neither_fit_nor_selected() -> None:
    from veracity.infer.metrics import binary_brier
    from veracity.train.calibrator import chosen_confidence, fit_logistic, training_rows

    records, groups = _contrastive(np.random.default_rng(1), 400)
    args = CalibratorArgs(c_grid=[0.01, 1.0])
    calibrator, metrics = fit_calibrator(records, ["s_ver"], args, target_risk=0.2, delta=0.1, groups=groups)
    parts = split_parts(records, args, groups)
    assert (metrics["fit_claims"], metrics["select_claims"], metrics["n_certify"]) == tuple(
        len(parts[p]) for p in ("fit", "select", "certify"))
    assert metrics["holdout_claims"] == metrics["n_certify"] == calibrator.risk_control["n_certify"]
    # the kept scores are the certify part's, and C was chosen on the select part alone
    conf, right = chosen_confidence(parts["certify"], calibrator)
    assert calibrator.risk_control["holdout_confidence"] == [round(c, 6) for c in conf]
    assert calibrator.risk_control["holdout_correct"] == right
    x, y = training_rows(parts["fit"], ["s_ver"], "all")
    refit = fit_logistic(x, y, ["s_ver"], metrics["C"])
    assert metrics["select_brier"] == pytest.approx(binary_brier(*chosen_confidence(parts["select"], refit)))
    assert refit.coefficients == pytest.approx(calibrator.coefficients)


def test_too_few_claims_for_three_parts_is_a_value_error() -> None:
    records = [_record(f"c{k}", f"Claim {k} .", 0.5, True) for k in range(2)]
    with pytest.raises(ValueError, match="too few to fit, select and certify"):
        fit_calibrator(records, ["s_ver"], CalibratorArgs())


def test_fractions_must_leave_a_fit_part() -> None:
    with pytest.raises(ValueError, match="leave a fit part"):
        CalibratorArgs(select_fraction=0.5, certify_fraction=0.5)


def test_risk_control_guarantee_holds_through_the_three_way_split() -> None:
    """P(true selective risk of the certified τ_cal > target) ≤ δ over random calib draws and split seeds: the
    synthetic coverage test of ``risk_control.py``, run through ``fit_calibrator`` (fit, select C, certify)."""
    target, delta, trials = 0.10, 0.10, 100
    violations, coverages = 0, []
    for trial in range(trials):
        rng = np.random.default_rng(1000 + trial)
        records, groups = _contrastive(rng, 1000)  # 2,000 claims: ~600 certify them
        calibrator, _ = fit_calibrator(records, ["s_ver"], CalibratorArgs(c_grid=[1.0], split_seed=trial),
                                       target_risk=target, delta=delta, groups=groups)
        tau = calibrator.risk_control["tau_cal"]
        if tau is None:
            continue
        (weight,), intercept = calibrator.coefficients, calibrator.intercept
        assert weight > 0  # confidence rises with p, so answering p_conf ≥ τ means answering p ≥ p*
        p_star = float(np.clip((np.log(tau / (1 - tau)) - intercept) / weight, 0.0, 1.0))
        true_risk = (1 - p_star) / 4  # E[(1 − p) / 2 | p ≥ p*] with p ~ U(0, 1), in closed form
        violations += true_risk > target + 1e-9
        coverages.append(1 - p_star)
    assert violations / trials <= delta  # the guarantee
    # not trivially abstaining everywhere: the oracle (risk 0.1 ⇔ p* = 0.6) answers 40%; ~600 certify claims
    # certify about 15–20% in most draws (the fixed sequence stops at once when its first test fails)
    assert len(coverages) > 0.6 * trials and np.mean(coverages) > 0.1


def test_train_calibrator_records_what_certified_it(data_root: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    """`veracity train calibrator` end to end (NLI-only, tiny verifier): metrics.json and the calibrator say how
    many claims certified τ_cal and from which sources; fit, select and certify claims are disjoint groups."""
    import json

    from tiny_models import build_tiny_nli

    from veracity.data_prep.prepare import PrepConfig, prepare
    from veracity.infer.eval.r2vc import read_r2vc_records
    from veracity.models.calibrator import LogisticCalibrator
    from veracity.train.calibrator import main

    prepare(PrepConfig(data_root=str(data_root), output_dir=str(tmp_path / "prep"), datasets=["fever", "vitaminc"],
                       train_fraction=0.0, calib_fraction=1.0, dev_fraction=0.0))
    verifier = build_tiny_nli(tmp_path / "verifier", tiny_encoder_dir,
                              {0: "entailment", 1: "neutral", 2: "contradiction"}, veracity_evidence_titles=False)
    sources = ["fever_symmetric", "vitaminc", "sufficient_facts_vitaminc"]
    out, prepared = tmp_path / "calibrator", tmp_path / "prep"
    metrics = main(["--config", "configs/train/calibrator_r2vc_embedded.yaml", "--prepared_dir", str(prepared),
                    "--use_generator", "false", "--nli_model", str(verifier), "--calibrator_dir", str(out),
                    "--select_fraction", "0.3", "--certify_fraction", "0.3", "--split_seed", "3",  # 4 / 6 / 3 claims
                    "--progress", "false"])
    written = json.loads((out / "metrics.json").read_text())
    assert written["n_certify"] == metrics["n_certify"] > 0 and written["certify_sources"] == sources
    calibrator = LogisticCalibrator.load(out / "calibrator.json")
    assert calibrator.risk_control["certify_sources"] == sources
    assert len(calibrator.risk_control["holdout_correct"]) == written["n_certify"]
    records, _ = read_r2vc_records(out / "simulation" / "records.jsonl")
    assert written["fit_claims"] + written["select_claims"] + written["n_certify"] == len(records)
    page = (out / "report.html").read_text(encoding="utf-8")  # its training report: no trainer, its fit and JSON
    assert "<td>train calibrator</td>" in page and "the calibrator is a JSON file" in page
    assert f"<span>n_certify</span><b>{written['n_certify']}</b>" in page and "no trainer_state.json" in page
