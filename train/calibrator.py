"""Fit the R2VC calibrator: logistic regression from candidate features to P(the candidate's label is gold).

Usage: veracity train calibrator --config configs/train/calibrator_r2vc_embedded.yaml [--output_dir DIR]

Inference is simulated on the ``calib`` split (never ``dev``) with the R2VC pipeline of the same config (no
calibrator, no abstention; ``simulation/records.jsonl``, resumable), which gives every candidate's feature row
(SPEC §1). Claims are split by a seeded hash into a fit part and a held-out part. For each regularisation
strength the calibrator is fit on the fit part (``fit_on: all`` — every parsed candidate labelled by whether its
label is gold, since inference scores every candidate and keeps the most confident; ``chosen`` — only the
candidate the uncalibrated pipeline would pick, as the paper describes) and scored on the held-out claims exactly
as inference uses it (the most confident candidate, its confidence against its correctness): the lowest Brier
score is kept. The held-out part's scores are stored in the calibrator, with the τ_cal that certifies the
configured ``target_risk`` / ``delta`` (``infer r2vc --abstention risk_control`` certifies its own target on
them). An engine without token log-probabilities gives a calibrator without that feature.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veracity.data_prep.splits import hash_unit
from veracity.infer.pipelines.r2vc.config import R2VCConfig
from veracity.infer.pipelines.r2vc.signals import SignalSettings, feature_names
from veracity.models.calibrator import LogisticCalibrator
from veracity.models.engine import EngineConfig

logger = logging.getLogger(__name__)


@dataclass
class CalibratorArgs:
    calibrator_dir: str = field(default="runs/train/calibrator_r2vc", metadata={
        "help": "Where calibrator.json, metrics.json and the calib simulation go."})
    holdout_fraction: float = field(default=0.3, metadata={"help": "Share of calib claims held out for selection."})
    fit_on: str = field(default="all", metadata={"help": "all (every parsed candidate) or chosen (SPEC's rows)."})
    c_grid: list[float] = field(default_factory=lambda: [0.01, 0.1, 1.0, 10.0], metadata={
        "help": "Inverse regularisation strengths tried (scikit-learn's C)."})

    def __post_init__(self) -> None:
        if self.fit_on not in ("all", "chosen"):
            raise ValueError(f"fit_on must be all or chosen, got {self.fit_on!r}")
        if not 0 < self.holdout_fraction < 1:
            raise ValueError(f"holdout_fraction must be in (0, 1), got {self.holdout_fraction}")


def make_parser() -> Any:
    from veracity.config import make_parser as parser

    return parser((CalibratorArgs, R2VCConfig, SignalSettings, EngineConfig), prog="veracity train calibrator")


def usable(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in record.get("candidates", []) if c.get("features")]


def training_rows(records: Sequence[dict[str, Any]], names: Sequence[str], fit_on: str
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Feature matrix and targets (label is gold) of the fit claims."""
    x, y = [], []
    for record in records:
        candidates = usable(record)
        if fit_on == "chosen" and candidates:
            candidates = [max(candidates, key=lambda c: c["signals"]["s_ver"])]
        for c in candidates:
            x.append([c["features"][n] for n in names])
            y.append(c["label"] == record["gold"])
    return np.asarray(x, dtype=float).reshape(-1, len(names)), np.asarray(y, dtype=bool)


def fit_logistic(x: np.ndarray, y: np.ndarray, names: Sequence[str], c: float) -> LogisticCalibrator:
    """scikit-learn's LogisticRegression on standardised features, the scaling folded into the weights."""
    from sklearn.linear_model import LogisticRegression

    mean, scale = x.mean(0), x.std(0)
    scale[scale == 0] = 1.0
    if len(set(y.tolist())) < 2:  # one class only: a constant calibrator at the observed rate (clipped)
        rate = float(np.clip(y.mean(), 1e-3, 1 - 1e-3))
        return LogisticCalibrator(list(names), [0.0] * len(names), float(np.log(rate / (1 - rate))))
    model = LogisticRegression(C=c, max_iter=1000).fit((x - mean) / scale, y)
    weights = model.coef_[0] / scale
    return LogisticCalibrator(list(names), weights.tolist(), float(model.intercept_[0] - (weights * mean).sum()))


def chosen_confidence(records: Sequence[dict[str, Any]], calibrator: LogisticCalibrator | None
                      ) -> tuple[list[float], list[bool]]:
    """Per claim: the confidence of the candidate inference would choose, and whether its label is gold."""
    confidence, correct = [], []
    for record in records:
        candidates = usable(record)
        if not candidates:
            confidence.append(0.0)
            correct.append(False)
            continue
        if calibrator is None:
            scores = [float(np.clip(c["signals"]["s_ver"], 0, 1)) for c in candidates]
        else:
            scores = calibrator.predict_proba([c["features"] for c in candidates]).tolist()
        best = int(np.argmax(scores))
        confidence.append(scores[best])
        correct.append(candidates[best]["label"] == record["gold"])
    return confidence, correct


RISK_TARGETS = (0.05, 0.1, 0.2, 0.3)  # the targets the calibrator reports certifiability for


def fit_calibrator(records: Sequence[dict[str, Any]], names: Sequence[str], args: CalibratorArgs, seed: int,
                   target_risk: float | None = None, delta: float = 0.1) -> tuple[LogisticCalibrator, dict[str, Any]]:
    """Fit on one part of the calib claims, select C on the held-out part, keep its scores for risk control (and
    record the threshold that certifies ``target_risk`` at level ``delta``)."""
    from veracity.infer.metrics import binary_brier, expected_calibration_error
    from veracity.infer.pipelines.r2vc.risk_control import risk_controlled_threshold

    records = [r for r in records if r.get("gold")]
    held = [hash_unit(str(r["id"]), seed) < args.holdout_fraction for r in records]
    fit = [r for r, h in zip(records, held, strict=True) if not h]
    holdout = [r for r, h in zip(records, held, strict=True) if h]
    if not fit or not holdout:
        raise ValueError(f"{len(records)} labelled calib claims are too few to fit and hold out a part")
    x, y = training_rows(fit, names, args.fit_on)
    raw_conf, raw_right = chosen_confidence(holdout, None)
    trials = []
    for c in args.c_grid:
        calibrator = fit_logistic(x, y, names, c)
        conf, right = chosen_confidence(holdout, calibrator)
        trials.append({"C": c, "brier": binary_brier(conf, right), "ece": expected_calibration_error(conf, right),
                       "calibrator": calibrator, "confidence": (conf, right)})
    best = min(trials, key=lambda t: (t["brier"], t["ece"]))
    calibrator = best["calibrator"]
    metrics = {"fit_claims": len(fit), "fit_rows": len(y), "fit_positive_rate": float(y.mean()) if len(y) else 0.0,
               "holdout_claims": len(holdout), "C": best["C"], "holdout_brier": best["brier"],
               "holdout_ece": best["ece"], "holdout_brier_uncalibrated": binary_brier(raw_conf, raw_right),
               "holdout_ece_uncalibrated": expected_calibration_error(raw_conf, raw_right),
               "trials": [{k: t[k] for k in ("C", "brier", "ece")} for t in trials]}
    conf, right = best["confidence"]
    # The held-out scores travel with the calibrator, so `infer r2vc --abstention risk_control` can certify any
    # target; the threshold for this run's target is recorded beside them.
    calibrator.risk_control = {"holdout_confidence": [round(float(c), 6) for c in conf],
                               "holdout_correct": [bool(r) for r in right]}
    # What the held-out claims can certify at this delta, target by target: the trade-off a user picks from.
    certified = {t: risk_controlled_threshold(conf, right, t, delta)
                 for t in sorted({*RISK_TARGETS, *([target_risk] if target_risk else [])})}
    if target_risk is not None:
        calibrator.risk_control.update(certified[target_risk])
    metrics["risk_control_by_target"] = {
        f"{t:g}": {k: r[k] for k in ("tau_cal", "coverage", "selective_risk", "answered")}
        for t, r in certified.items()}
    calibrator.metrics = metrics
    return calibrator, metrics


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    import dataclasses

    from veracity.config import parse_config
    from veracity.infer.eval.r2vc import load_records, table_cell
    from veracity.infer.pipelines.r2vc.run import run
    from veracity.io import write_json
    from veracity.rundir import package_versions, write_run_config

    args, config, settings, engine_config = parse_config(make_parser(), argv)
    out = Path(args.calibrator_dir)
    write_run_config(out, args, config, settings, engine_config, job="train calibrator")
    # Simulate inference on calib with this very pipeline: no calibrator, no abstention, every feature recorded.
    simulation = out / "simulation"
    run(dataclasses.replace(config, split="calib", calibrator=None, abstention="none", output_dir=str(simulation),
                            shard=None), settings, engine_config)
    records, _ = load_records(simulation / "records.jsonl")
    generated = [c for r in records for c in r.get("candidates", []) if c.get("from") == "generator" and c["label"]]
    logprobs = bool(generated) and all(c.get("mean_logprob") is not None for c in generated)
    names = feature_names(logprobs=logprobs, nli_candidate=config.nli_candidate)
    calibrator, metrics = fit_calibrator(records, names, args, config.seed, config.target_risk, config.delta)
    calibrator.versions = package_versions(("veracity", "scikit-learn", "numpy"))
    calibrator.save(out / "calibrator.json")
    write_json(out / "metrics.json", {**metrics, "features": names, "risk_control": {
        k: v for k, v in calibrator.risk_control.items() if not k.startswith("holdout_")}})
    print(f"calibrator ({', '.join(names)}) fit on {metrics['fit_rows']} candidate rows of {metrics['fit_claims']} "
          f"calib claims, C={metrics['C']}; held-out {metrics['holdout_claims']} claims: Brier "
          f"{metrics['holdout_brier']:.3f} (uncalibrated {metrics['holdout_brier_uncalibrated']:.3f}), ECE "
          f"{metrics['holdout_ece']:.3f} (uncalibrated {metrics['holdout_ece_uncalibrated']:.3f})")
    if "tau_cal" in calibrator.risk_control:
        rc = calibrator.risk_control
        print(f"risk control (target {rc['target_risk']}, delta {rc['delta']}): tau_cal {rc['tau_cal']}, "
              f"held-out coverage {rc['coverage']:.3f}, selective risk {table_cell(rc['selective_risk'])}")
    print("certifiable on the held-out claims (target: tau_cal, coverage): " + ", ".join(
        f"{t}: {table_cell(r['tau_cal'])}, {r['coverage']:.3f}"
        for t, r in metrics["risk_control_by_target"].items()))
    print(f"wrote {out / 'calibrator.json'}")
    return metrics
