"""Fit the R2VC calibrator: logistic regression from candidate features to P(the candidate's label is gold).

Usage: veracity train calibrator --config configs/train/calibrator_r2vc_embedded.yaml [--output_dir DIR]

Inference is simulated on the ``calib`` split (never ``dev``) with the R2VC pipeline of the same config (no
calibrator, no abstention; ``simulation/records.jsonl``, resumable), which gives every candidate's feature row
(docs/pipelines/r2vc.md#calibrator; the split: docs/training.md#calibrator). The calib claims are split three
ways by a seeded hash of their claim group (``data_prep/splits.py``'s connected groups: claims sharing a normalised
claim text or a case id, so VitaminC contrastive partners stay together), each part used for one thing only:

- **fit** — for each regularisation strength the calibrator is fit here (``fit_on: all`` — every parsed candidate
  labelled by whether its label is gold, since inference scores every candidate and keeps the most confident;
  ``chosen`` — only the candidate the uncalibrated pipeline would pick, as the paper describes);
- **select** (``select_fraction``) — each fit is scored exactly as inference uses it (the most confident
  candidate, its confidence against its correctness): the lowest Brier score chooses C;
- **certify** (``certify_fraction``) — the chosen calibrator's scores here are stored in the calibrator with the
  τ_cal that certifies the configured ``target_risk`` / ``delta`` (``infer r2vc --abstention risk_control``
  certifies its own target on them); they chose nothing, so the certificate's guarantee holds. The Brier / ECE
  reported as ``holdout_*`` are measured here too. ``metrics.json`` says how many claims certified it
  (``n_certify``) and on which sources (``certify_sources``).

An engine without token log-probabilities gives a calibrator without that feature.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.errors import DataError
from veracity.data_prep.prepared import read_prepared
from veracity.data_prep.splits import claim_key, component_representatives, hash_unit, record_keys
from veracity.infer.eval.r2vc import read_r2vc_records, table_cell
from veracity.infer.metrics import binary_brier, expected_calibration_error
from veracity.infer.pipelines.r2vc.config import R2VCConfig
from veracity.infer.pipelines.r2vc.items import check_model_paths, evaluated_sources, prepared_items, user_items
from veracity.infer.pipelines.r2vc.risk_control import risk_controlled_threshold
from veracity.infer.pipelines.r2vc.run import run
from veracity.infer.pipelines.r2vc.signals import SignalSettings, feature_names
from veracity.io import write_json
from veracity.models.calibrator import LogisticCalibrator, logprob_definition
from veracity.models.device import resolve_device
from veracity.models.engine import EngineConfig
from veracity.rundir import package_versions, write_run_config
from veracity.train.report import finish_training_run

logger = logging.getLogger(__name__)


@dataclass
class CalibratorArgs:
    calibrator_dir: str = field(default="runs/train/calibrator_r2vc", metadata={
        "help": "Where calibrator.json, metrics.json and the calib simulation go."})
    select_fraction: float = field(default=0.2, metadata={
        "help": "Share of calib claim groups that choose C (by Brier); fit on the rest but the certify part."})
    certify_fraction: float = field(default=0.3, metadata={
        "help": "Share of calib claim groups that certify the risk-controlled tau_cal and measure the held-out "
                "Brier / ECE; used for nothing else."})
    split_seed: int = field(default=13, metadata={
        "help": "Seeds the fit / select / certify split of the calib claim groups (not the sampling --seed)."})
    fit_on: str = field(default="all", metadata={
        "help": "all (every parsed candidate) or chosen (the paper's rows: docs/training.md#calibrator)."})
    c_grid: list[float] = field(default_factory=lambda: [0.01, 0.1, 1.0, 10.0], metadata={
        "help": "Inverse regularisation strengths tried (scikit-learn's C)."})

    def __post_init__(self) -> None:
        if self.fit_on not in ("all", "chosen"):
            raise ValueError(f"fit_on must be all or chosen, got {self.fit_on!r}")
        if not (0 < self.select_fraction and 0 < self.certify_fraction
                and self.select_fraction + self.certify_fraction < 1):
            raise ValueError("select_fraction and certify_fraction must be > 0 and leave a fit part (sum < 1), got "
                             f"{self.select_fraction} and {self.certify_fraction}")


def make_parser() -> Any:
    return parser_for((CalibratorArgs, R2VCConfig, SignalSettings, EngineConfig), prog="veracity train calibrator")


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
    from sklearn.linear_model import LogisticRegression  # lazy: a second to import, only the fit needs it

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
    per_record = [usable(record) for record in records]
    flat = [c for candidates in per_record for c in candidates]
    if calibrator is None:
        all_scores = [float(np.clip(c["signals"]["s_ver"], 0, 1)) for c in flat]
    else:  # one call for every candidate of every claim: the same numbers, row by row
        all_scores = calibrator.predict_proba([c["features"] for c in flat]).tolist() if flat else []
    confidence, correct, start = [], [], 0
    for record, candidates in zip(records, per_record, strict=True):
        if not candidates:
            confidence.append(0.0)
            correct.append(False)
            continue
        scores = all_scores[start : start + len(candidates)]
        start += len(candidates)
        best = int(np.argmax(scores))
        confidence.append(scores[best])
        correct.append(candidates[best]["label"] == record["gold"])
    return confidence, correct


RISK_TARGETS = (0.05, 0.1, 0.2, 0.3)  # the targets the calibrator reports certifiability for
PARTS = ("fit", "select", "certify")  # the calib claim groups' three uses, each part used for one


def claim_groups(records: Sequence[dict[str, Any]], groups: Mapping[str, Sequence[str]] | None = None
                 ) -> list[str]:
    """Per record, its claim group: the smallest union-find key of its connected component
    (:func:`~veracity.data_prep.splits.component_representatives`). ``groups`` maps a record id to its keys (its
    claim and case id, from the prepared records); a record without an entry is keyed by its claim text (by its
    id when it has none)."""
    groups = groups or {}
    key_sets = []
    for record in records:
        keys = list(groups.get(str(record["id"]), ()))
        if not keys:
            claim = record.get("claim")
            keys = [claim_key(claim)] if isinstance(claim, str) and claim.strip() else [f"id:{record['id']}"]
        key_sets.append(keys)
    return [str(rep) for rep in component_representatives(key_sets)]


def split_parts(records: Sequence[dict[str, Any]], args: CalibratorArgs,
                groups: Mapping[str, Sequence[str]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The records in three parts by a seeded hash of their claim group: every record of a group in one part."""
    fit_cut = 1 - args.select_fraction - args.certify_fraction
    parts: dict[str, list[dict[str, Any]]] = {part: [] for part in PARTS}
    for record, group in zip(records, claim_groups(records, groups), strict=True):
        unit = hash_unit(group, args.split_seed)
        parts["fit" if unit < fit_cut else "select" if unit < fit_cut + args.select_fraction else "certify"].append(
            record)
    return parts


def fit_calibrator(records: Sequence[dict[str, Any]], names: Sequence[str], args: CalibratorArgs,
                   seed: int | None = None, target_risk: float | None = None, delta: float = 0.1,
                   groups: Mapping[str, Sequence[str]] | None = None) -> tuple[LogisticCalibrator, dict[str, Any]]:
    """Fit on one part of the calib claim groups, select C on a second, and certify on a third that took no part
    in either: its scores are kept for risk control, with the threshold that certifies ``target_risk`` at level
    ``delta``. ``seed`` seeds the split (default ``args.split_seed``); ``groups``: record id → union-find keys
    (see :func:`claim_groups`)."""
    if seed is not None:
        args = dataclasses.replace(args, split_seed=seed)
    records = [r for r in records if r.get("gold")]
    parts = split_parts(records, args, groups)
    fit, select, certify = (parts[p] for p in PARTS)
    if not all(parts.values()):
        raise ValueError(f"{len(records)} labelled calib claims are too few to fit, select and certify on "
                         f"separate claim groups ({', '.join(f'{p} {len(parts[p])}' for p in PARTS)})")
    x, y = training_rows(fit, names, args.fit_on)
    trials = []
    for c in args.c_grid:
        calibrator = fit_logistic(x, y, names, c)
        conf, right = chosen_confidence(select, calibrator)
        trials.append({"C": c, "brier": binary_brier(conf, right), "ece": expected_calibration_error(conf, right),
                       "calibrator": calibrator})
    best = min(trials, key=lambda t: (t["brier"], t["ece"]))
    calibrator = best["calibrator"]
    conf, right = chosen_confidence(certify, calibrator)  # scores on claims that chose nothing
    raw_conf, raw_right = chosen_confidence(certify, None)
    metrics = {"fit_claims": len(fit), "fit_rows": len(y), "fit_positive_rate": float(y.mean()) if len(y) else 0.0,
               "select_claims": len(select), "n_certify": len(certify), "holdout_claims": len(certify),
               "split_seed": args.split_seed, "C": best["C"],
               "select_brier": best["brier"], "select_ece": best["ece"],
               "holdout_brier": binary_brier(conf, right), "holdout_ece": expected_calibration_error(conf, right),
               "holdout_brier_uncalibrated": binary_brier(raw_conf, raw_right),
               "holdout_ece_uncalibrated": expected_calibration_error(raw_conf, raw_right),
               "trials": [{k: t[k] for k in ("C", "brier", "ece")} for t in trials]}
    # The certify part's scores travel with the calibrator, so `infer r2vc --abstention risk_control` can certify
    # any target on them; the threshold for this run's target is recorded beside them.
    calibrator.risk_control = {"holdout_confidence": [round(float(c), 6) for c in conf],
                               "holdout_correct": [bool(r) for r in right], "n_certify": len(certify),
                               "certify_split": "calib"}
    # What the certify claims can certify at this delta, target by target: the trade-off a user picks from.
    certified = {t: risk_controlled_threshold(conf, right, t, delta)
                 for t in sorted({*RISK_TARGETS, *([target_risk] if target_risk else [])})}
    if target_risk is not None:
        calibrator.risk_control.update(certified[target_risk])
    metrics["risk_control_by_target"] = {
        f"{t:g}": {k: r[k] for k in ("tau_cal", "coverage", "selective_risk", "answered")}
        for t, r in certified.items()}
    calibrator.metrics = metrics
    return calibrator, metrics


def prepared_groups(config: R2VCConfig) -> dict[str, list[str]]:
    """Record id (``source/id``, as the simulation names it) → its union-find keys: its claim and its case id
    (namespaced by its source), from the prepared calib records. ``--claims`` files have no case ids: {}."""
    if config.claims:
        return {}
    return {f"{source}/{record.id}": record_keys(record, source)
            for source in config.sources for record in read_prepared(config.prepared_dir, source, ["calib"])}


def simulation_logprob_definition(simulation: Path, records: Sequence[dict[str, Any]]) -> str | None:
    """The one log-prob definition (``logprob_definition``) the simulation's generator candidates were made under,
    from each record's own decoding facts (a record from before they were kept: the run record's).

    Raises:
        DataError: the records mix definitions (a resumed simulation whose server refused the schema in one run and
            enforced it in another, answers replayed from a cache made otherwise): one calibrator fits one.
    """
    recorded = (yaml.safe_load((simulation / "run_config.yaml").read_text(encoding="utf-8")) or {}).get("decoding")
    found = Counter(logprob_definition(r["decoding"] if "decoding" in r else recorded) for r in records
                    if any(c.get("from") == "generator" and c.get("label") for c in r.get("candidates", [])))
    if len(found) > 1:
        mix = "; ".join(f"{n} claims {definition}" for definition, n in found.most_common())
        raise DataError(simulation / "records.jsonl", None,
                        f"the simulation's log-probabilities were made under more than one definition ({mix}): a "
                        "calibrator fits one. Run it again into a new --calibrator_dir, with an engine that keeps one "
                        "way of decoding (or --constrained false)")
    return next(iter(found), None)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args, config, settings, engine_config = parse_config(make_parser(), argv)
    out = Path(args.calibrator_dir)
    # the models and the calib items before the run folder: on a fresh clone a missing one is one error: line that
    # leaves nothing behind
    check_model_paths(config, engine_config)
    if config.claims:
        user_items(config.claims, config.index_dir)
    else:
        prepared_items(dataclasses.replace(config, split="calib"))
    write_run_config(out, args, config, settings, engine_config, job="train calibrator",
                     device=resolve_device(engine_config.device))
    # Simulate inference on calib with this very pipeline: no calibrator, no abstention, every feature recorded.
    simulation = out / "simulation"
    run(dataclasses.replace(config, split="calib", calibrator=None, abstention="none", output_dir=str(simulation),
                            shard=None), settings, engine_config)
    records, _ = read_r2vc_records(simulation / "records.jsonl")
    generated = [c for r in records for c in r.get("candidates", []) if c.get("from") == "generator" and c["label"]]
    logprobs = bool(generated) and all(c.get("mean_logprob") is not None for c in generated)
    names = feature_names(logprobs=logprobs, nli_candidate=config.nli_candidate)
    calibrator, metrics = fit_calibrator(records, names, args, target_risk=config.target_risk, delta=config.delta,
                                         groups=prepared_groups(config))
    # The sources the certificate holds for: a run evaluating others says that its guarantee assumes
    # exchangeability with these (infer r2vc's risk_control_guarantee).
    calibrator.risk_control["certify_sources"] = metrics["certify_sources"] = evaluated_sources(config)
    calibrator.versions = package_versions(("veracity", "scikit-learn", "numpy"))
    if logprobs:  # the definition its log-prob feature was made under: inference refuses another
        calibrator.logprob_definition = simulation_logprob_definition(simulation, records)
    calibrator.save(out / "calibrator.json")
    write_json(out / "metrics.json", {**metrics, "features": names, "risk_control": {
        k: v for k, v in calibrator.risk_control.items() if not k.startswith("holdout_")}})
    print(f"calibrator ({', '.join(names)}) fit on {metrics['fit_rows']} candidate rows of {metrics['fit_claims']} "
          f"calib claims, C={metrics['C']} chosen on {metrics['select_claims']} others; certified on "
          f"{metrics['n_certify']} claims used for nothing else ({', '.join(metrics['certify_sources'])}): Brier "
          f"{metrics['holdout_brier']:.3f} (uncalibrated {metrics['holdout_brier_uncalibrated']:.3f}), ECE "
          f"{metrics['holdout_ece']:.3f} (uncalibrated {metrics['holdout_ece_uncalibrated']:.3f})")
    if "tau_cal" in calibrator.risk_control:
        rc = calibrator.risk_control
        print(f"risk control (target {rc['target_risk']}, delta {rc['delta']}): tau_cal {rc['tau_cal']}, "
              f"held-out coverage {rc['coverage']:.3f}, selective risk {table_cell(rc['selective_risk'])}")
    print("certifiable on the certify claims (target: tau_cal, coverage): " + ", ".join(
        f"{t}: {table_cell(r['tau_cal'])}, {r['coverage']:.3f}"
        for t, r in metrics["risk_control_by_target"].items()))
    print(f"wrote {out / 'calibrator.json'}")
    finish_training_run(out, None, device=resolve_device(engine_config.device), data={
        "calib claims": f"{metrics['fit_claims']} fit, {metrics['select_claims']} select C, {metrics['n_certify']} "
                        f"certify, of {', '.join(metrics['certify_sources'])}"})
    return metrics
