"""R2VC batch inference: retrieval-augmented, verified, calibrated fact-checking (SPEC §1).

Usage: veracity infer r2vc --config configs/pipelines/r2vc_embedded.yaml [--sources fever_symmetric vitaminc]
                           [--split dev] [--max_examples 50] [--output_dir runs/r2vc] [--shard 0/4]
       veracity infer r2vc --config configs/pipelines/r2vc_embedded.yaml --claims my_claims.jsonl
                           --index_dir runs/index/my_corpus --output_dir runs/r2vc_mine

Claims come from prepared sources (their own evidence, or hybrid retrieval for Climate-FEVER claims and FEVER
paper_dev) or from ``--claims`` (JSONL ``{id, claim[, evidence, label]}``; ``evidence`` a string, a list of
strings or of ``{text, title}``; claims without evidence retrieve from ``--index_dir``). Writes
``records.jsonl`` (one record per claim, resumable; ``records.shard-i-of-n.jsonl`` when sharded),
``summary.json`` (throughput and seconds per stage) and ``run_config.yaml``; unsharded runs end with
``veracity eval r2vc`` on the records (``metrics.json``, ``predictions.jsonl``, ``report.md``, plots).

Bad input stops the run before anything is written, with exit status 2 and one line naming the file (and line): a
malformed claims row, a repeated or missing id, a claims file (or a prepared selection) without claims, a
calibrator file that is missing or unreadable. ``max_examples`` keeps the first claims of each source in an order
seeded by ``subset_seed``; ``seed`` seeds sampling only. With ``abstention: risk_control`` the run record,
``metrics.json`` and ``report.md`` carry ``risk_control_guarantee``: the sources τ_cal was certified on, the ones
evaluated, and that the guarantee assumes the two are exchangeable.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.data_prep.schema import ClaimExample, to_ternary
from veracity.data_prep.splits import hash_int
from veracity.infer.pipelines.r2vc.config import RETRIEVAL_CORPORA, R2VCConfig
from veracity.infer.pipelines.r2vc.signals import SignalSettings
from veracity.models.engine import EngineConfig

logger = logging.getLogger(__name__)


def make_parser() -> Any:
    from veracity.config import make_parser as parser

    return parser((R2VCConfig, SignalSettings, EngineConfig), prog="veracity infer r2vc")


def passages_of(example: ClaimExample) -> list[dict[str, str]]:
    """A prepared example's own evidence: its passages, or its evidence text as one passage."""
    passages = [{"text": p.text, "title": p.title} for p in example.evidence if p.text.strip()]
    if not passages and example.evidence_text.strip():
        passages = [{"text": example.evidence_text, "title": ""}]
    return passages


def prepared_items(config: R2VCConfig) -> list[dict[str, Any]]:
    """Items of the configured prepared sources and split (``max_examples`` per source, the first in an order
    seeded by ``subset_seed`` — never by the sampling ``seed``). No claim at all is a PreparedDataError."""
    from veracity.data_prep.prepared import PreparedDataError, read_prepared

    items = []
    for source in config.sources:
        examples = [e for e in read_prepared(config.prepared_dir, source, [config.split])
                    if isinstance(e, ClaimExample)]
        examples.sort(key=lambda e: hash_int(f"{config.subset_seed}:{e.id}"))
        if config.max_examples:
            examples = examples[: config.max_examples]
        corpus = RETRIEVAL_CORPORA.get(source)
        if corpus and config.index_dir:
            corpus = config.index_dir
        for e in examples:
            items.append({"id": f"{source}/{e.id}", "claim": e.claim, "gold": e.label, "source": source,
                          "passages": [] if corpus else passages_of(e), "retrieve_from": corpus})
    if not items:
        raise PreparedDataError(f"{config.prepared_dir}: no claims in the {config.split!r} split of "
                                f"{list(config.sources)}; nothing to run (check --sources and --split)")
    return items


def user_items(path: str, index_dir: str | None) -> list[dict[str, Any]]:
    """Items from a user's JSONL; a bad row is a DataError naming file, line and field (an id seen before names
    the line it was first on), and so is a file without any claim."""
    from veracity.data_prep.errors import DataError
    from veracity.data_prep.readers import read_jsonl
    from veracity.infer.batch import IdCheck

    items = []
    ids = IdCheck(path)
    for line, row in read_jsonl(path):
        claim, evidence = row.get("claim"), row.get("evidence")
        if not isinstance(claim, str) or not claim.strip():
            raise DataError(path, line, "missing or empty claim", field="claim")
        ids.check(line, row)
        if isinstance(evidence, str):
            evidence = [evidence]
        if evidence is not None and not (isinstance(evidence, list) and all(
                isinstance(e, str) or (isinstance(e, dict) and isinstance(e.get("text"), str)) for e in evidence)):
            raise DataError(path, line, "must be a string, a list of strings or a list of {text, title}",
                            field="evidence")
        gold = to_ternary(row["label"]) if row.get("label") is not None else None
        if row.get("label") is not None and gold is None:
            raise DataError(path, line, f"unknown label {row['label']!r}", field="label")
        passages = [{"text": e, "title": ""} if isinstance(e, str) else
                    {"text": e["text"], "title": str(e.get("title", ""))} for e in evidence or []]
        if not passages and not index_dir:
            raise DataError(path, line, "no evidence and no --index_dir to retrieve from", field="evidence")
        items.append({"id": str(row["id"]), "claim": claim, "gold": gold, "source": "claims",
                      "passages": passages, "retrieve_from": None if passages else index_dir})
    ids.require_some("claims")
    return items


def load_calibrator(config: R2VCConfig) -> Any | None:
    """The configured calibrator, or None; a missing or unreadable file is a DataError naming it (checked before
    anything is written)."""
    if not config.calibrator:
        return None
    from veracity.data_prep.errors import DataError
    from veracity.models.calibrator import LogisticCalibrator, calibrator_file

    path = calibrator_file(config.calibrator)
    if not path.is_file():
        raise DataError(path, None, "no calibrator file here; fit one with `veracity train calibrator --config "
                                    "configs/train/calibrator_r2vc_embedded.yaml` or pass --calibrator none")
    try:
        calibrator = LogisticCalibrator.load(path)
    except (OSError, ValueError) as error:  # JSONDecodeError is a ValueError
        cause = str(error).removeprefix(f"{path}: ")
        raise DataError(path, None, f"not a calibrator file ({cause})") from None
    if config.abstention == "risk_control" and "holdout_confidence" not in (calibrator.risk_control or {}):
        raise DataError(path, None, "abstention risk_control: the calibrator keeps no certify-part calib scores; "
                                    "refit it with `veracity train calibrator`")
    return calibrator


def evaluated_sources(config: R2VCConfig) -> list[str]:
    """What a run evaluates (or a calibrator certifies on), as a list of names: the prepared sources, or the
    claims file."""
    return [f"claims file {config.claims}"] if config.claims else list(config.sources)


def risk_control_scope(config: R2VCConfig, calibrator: Any | None) -> dict[str, Any] | None:
    """For ``abstention: risk_control``: the claims the τ_cal certificate was computed on and the ones this run
    evaluates, and what the guarantee then assumes. None for other abstention modes."""
    if config.abstention != "risk_control" or calibrator is None:
        return None
    held = calibrator.risk_control or {}
    certified = held.get("certify_sources")
    evaluated = evaluated_sources(config)
    same = certified is not None and sorted(certified) == sorted(evaluated)
    shown = certified if certified is not None else "not recorded (a calibrator fit before sources were recorded)"
    if same:
        note = (f"P(selective risk > {config.target_risk:g}) <= {config.delta:g} holds for claims exchangeable with "
                f"the certifying ones: certified on the {held.get('certify_split', 'calib')} split of {certified}, "
                f"evaluated on the {config.split} split of the same sources.")
    else:
        note = (f"The guarantee P(selective risk > {config.target_risk:g}) <= {config.delta:g} assumes the evaluated "
                f"claims are exchangeable with the certifying ones, and the sources differ: certified on {shown}, "
                f"evaluated on {evaluated}. Across other sources it is an assumption, not a guarantee.")
    return {"certified_on": {"sources": certified, "split": held.get("certify_split"),
                             "claims": held.get("n_certify", len(held.get("holdout_correct", [])))},
            "evaluated_on": {"sources": evaluated, "split": None if config.claims else config.split},
            "same_sources": same, "assumes": "exchangeability", "note": note}


def run(config: R2VCConfig, settings: SignalSettings, engine_config: EngineConfig) -> dict[str, Any]:
    """Run R2VC with parsed settings (what ``main`` does after parsing; the calibrator's simulation calls it)."""
    from veracity.infer.batch import output_lock, parse_shard, run_batch
    from veracity.infer.pipelines.r2vc.pipeline import R2VCPipeline
    from veracity.io import write_json
    from veracity.rundir import write_run_config

    shard = parse_shard(config.shard)
    out = Path(config.output_dir)
    # Bad input (DataError, PreparedDataError) stops here, before anything is written; the CLI prints it.
    items = user_items(config.claims, config.index_dir) if config.claims else prepared_items(config)
    scope = risk_control_scope(config, load_calibrator(config))
    name = "records.jsonl" if shard[1] == 1 else f"records.shard-{shard[0]}-of-{shard[1]}.jsonl"
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with output_lock(out / name):  # a refused second run must not overwrite the running one's record
            pipeline = R2VCPipeline(config, settings, engine_config)  # checks models and thresholds first
            try:
                # the certificate's scope is part of the record: what the guarantee was computed on
                extra = [{"risk_control_guarantee": scope}] if scope else []
                write_run_config(out, config, settings, engine_config, *extra, job="infer r2vc",
                                 models=pipeline.model_ids(), decoding=pipeline.decoding(),
                                 resumes=out / name)  # other settings: refused here
                summary = run_batch(items, pipeline, out / name, shard=shard, batch_size=config.claims_per_call,
                                    progress=config.progress, retry_errors=config.retry_errors, take_lock=False,
                                    error_fields=("gold", "source"))  # eval r2vc counts a failed claim wrong
            finally:
                pipeline.close()
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # a run that stopped before its first file leaves no empty folder behind
        raise
    report = {**summary.to_dict(), "seconds_per_stage": {k: round(v, 2) for k, v in pipeline.seconds.items()},
              "claims_per_second": round(summary.items_per_second, 4), "verifier": pipeline.verifier.stats.to_dict()}
    if summary.processed or not (out / "summary.json").exists():  # a no-op resume keeps the timings of the work
        write_json(out / "summary.json", report)
    print(summary)
    if report["seconds_per_stage"]:
        print("seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in report["seconds_per_stage"].items()))
    if shard[1] == 1:
        from veracity.infer.eval.r2vc import main as evaluate

        report["metrics"] = evaluate(["--predictions", str(out / name), "--output_dir", str(out)])
        if scope:
            report["metrics"] = record_scope(out, report["metrics"], scope)
    return json.loads(json.dumps(report))


def record_scope(out: Path, metrics: dict[str, Any], scope: dict[str, Any]) -> dict[str, Any]:
    """Add the risk-control certificate's scope to ``metrics.json`` and ``report.md`` (and say it)."""
    from veracity.io import write_json

    metrics = {**metrics, "risk_control_guarantee": scope}
    write_json(out / "metrics.json", metrics)
    report = out / "report.md"
    if report.is_file():
        text = report.read_text(encoding="utf-8").rstrip("\n")
        report.write_text(f"{text}\n\n## Risk-control guarantee\n\n{scope['note']}\n", encoding="utf-8")
    print(f"risk control: {scope['note']}")
    return metrics


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from veracity.config import parse_config

    return run(*parse_config(make_parser(), argv))
