"""AVeriTeC evaluation: Q-only and Q+A Hungarian METEOR, the old AVeriTeC score, label accuracy and macro-F1.

Usage: veracity eval averitec --predictions P.csv --gold G.csv --output_dir runs/eval_averitec

Inputs are FEVER-8 leaderboard CSVs (``id,claim,evi,label,split``) or AVeriTeC JSON: a list of
``{claim_id | id, claim, label | pred_label, evidence: [{question, answer}]}`` or, for gold, the official
``questions: [{question, answers: [{answer, answer_type, boolean_explanation}]}]`` layout (flattened as FEVER-8's
``prepare_leaderboard_submission.py`` does: one pair per answer, a Boolean answer followed by ". " and its
explanation). A JSON record without an id gets its position, as FEVER-8 numbers dev claims.
Rows are joined on the claim id; a gold claim without a prediction scores 0 and counts as wrong. That is how an
error is counted here, as by every scorer of the project (``veracity eval r2vc`` too): ``veracity infer aic``
writes no row for a claim that failed or raised, so it is a wrong answer, and ``n_errors`` (the same count as
``n_missing_predictions``, under the name every scorer uses) shows how many there were.
``--ev2r true`` adds the Ev²R score (``ev2r_*`` keys) with an LLM judge: the judge is the engine options
(``--engine --model …``, as ``veracity infer generate``), the prompt ``--ev2r_prompt``; see
``veracity.infer.eval.ev2r``.
Writes ``metrics.json``, ``per_claim.jsonl`` and ``run_config.yaml``; bad input exits with status 2 and one line
naming the file, line (or record) and field. Scoring itself is in ``veracity.infer.eval.averitec_score``; the
``evi`` format in ``veracity.data_prep.averitec``.
"""

from __future__ import annotations

import csv
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.averitec import flat_pairs, parse_fever8_evidence, qa_pair
from veracity.data_prep.errors import DataError
from veracity.data_prep.schema import QAPair
from veracity.infer.eval.averitec_score import (
    MAX_PREDICTED_PAIRS,
    OLD_AVERITEC_THRESHOLD,
    VERDICTS,
    ClaimScore,
    aggregate,
    score_claim,
)
from veracity.infer.eval.ev2r import Ev2RSettings, aggregate_ev2r, score_claims
from veracity.io import write_json, write_jsonl
from veracity.models.device import resolve_device
from veracity.models.engine import DecodingTally, EngineConfig
from veracity.models.engine_factory import make_engine
from veracity.models.nltk_data import ensure_nltk_data
from veracity.rundir import record_facts, summarise_facts, write_run_config

logger = logging.getLogger(__name__)

CSV_REQUIRED = ("id", "evi", "label")


@dataclass
class AveritecEvalArgs:
    predictions: str = field(metadata={"help": "System output: FEVER-8 CSV or AVeriTeC JSON."})
    gold: str = field(metadata={"help": "Gold: FEVER-8 solution CSV or AVeriTeC JSON (e.g. dev.json)."})
    output_dir: str = field(default="runs/eval_averitec", metadata={"help": "Run directory."})
    threshold: float = field(default=OLD_AVERITEC_THRESHOLD,
                             metadata={"help": "Q+A score a claim must exceed (strictly) for the old AVeriTeC score."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar over claims."})

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold < 1.0:
            raise ValueError(f"threshold must be in [0, 1), got {self.threshold}")


@dataclass(frozen=True)
class ClaimRecord:
    id: str
    label: str
    pairs: list[QAPair]
    claim: str = ""


def _checked_label(label: Any, path: Path, line: int | None, where: str, name: str) -> str:
    if not isinstance(label, str) or label not in VERDICTS:
        raise DataError(path, line, f"{where}unknown label {label!r} (expected one of {', '.join(VERDICTS)})", name)
    return label


def read_csv(path: Path) -> list[ClaimRecord]:
    """FEVER-8 CSV rows (any ``split``); line numbers are where each record starts."""
    csv.field_size_limit(sys.maxsize)
    records = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in CSV_REQUIRED if name not in (reader.fieldnames or [])]
        if missing:
            raise DataError(path, 1, f"missing column (header: {','.join(reader.fieldnames or [])})", missing[0])
        start = reader.line_num + 1
        for row in reader:
            if None in row or any(row[name] is None for name in CSV_REQUIRED):
                raise DataError(path, start, f"expected {len(reader.fieldnames)} columns", None)
            if not row["id"].strip():
                raise DataError(path, start, "empty claim id", "id")
            try:
                pairs = parse_fever8_evidence(row["evi"])
            except ValueError as error:
                raise DataError(path, start, str(error), "evi") from None
            records.append(ClaimRecord(row["id"].strip(), _checked_label(row["label"], path, start, "", "label"),
                                       pairs, row.get("claim") or ""))
            start = reader.line_num + 1
    return records


def _json_pairs(item: dict[str, Any], path: Path, where: str) -> list[QAPair]:
    if "evidence" in item:
        evidence = item["evidence"] or []
        if not isinstance(evidence, list):
            raise DataError(path, None, f"{where}expected a list of {{question, answer}}", "evidence")
        pairs = []
        for k, qa in enumerate(evidence):
            if not (isinstance(qa, dict) and all(isinstance(qa.get(k), str) for k in ("question", "answer"))):
                raise DataError(path, None, f"{where}evidence item {k} is not {{question: str, answer: str}}",
                                "evidence")
            pairs.append(qa_pair(qa["question"], qa["answer"]))
        return pairs
    pairs = []
    for k, question in enumerate(item.get("questions") or []):
        if not isinstance(question, dict) or not isinstance(question.get("question"), str):
            raise DataError(path, None, f"{where}questions item {k} has no question string", "questions")
        answers = question.get("answers") or []
        for answer in answers if isinstance(answers, list) else [answers]:
            if not isinstance(answer, dict) or not isinstance(answer.get("answer"), str):
                raise DataError(path, None, f"{where}questions item {k}: an answer without an answer string",
                                "questions")
            text = answer["answer"]
            if answer.get("answer_type") == "Boolean" and "boolean_explanation" in answer:
                text += ". " + answer["boolean_explanation"]
            pairs.append(qa_pair(question["question"], text))
    return pairs


def read_json(path: Path, label_keys: tuple[str, ...]) -> list[ClaimRecord]:
    """AVeriTeC JSON records; the label is the first of ``label_keys`` present."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise DataError(path, error.lineno, f"malformed JSON: {error.msg}") from None
    if not isinstance(data, list):
        raise DataError(path, None, "expected a JSON list of claim records")
    records = []
    for index, item in enumerate(data):
        where = f"record {index}: "
        if not isinstance(item, dict):
            raise DataError(path, None, f"{where}expected an object")
        claim_id = next((item[k] for k in ("claim_id", "id") if item.get(k) is not None), index)
        label_key = next((k for k in label_keys if k in item), label_keys[0])
        label = _checked_label(item.get(label_key), path, None, where, label_key)
        records.append(ClaimRecord(str(claim_id).strip(), label, _json_pairs(item, path, where),
                                   str(item.get("claim") or "")))
    return records


def read_claims(path: str | Path, role: str) -> dict[str, ClaimRecord]:
    """``{claim id: record}`` from a CSV or JSON file; ``role`` is ``gold`` or ``predictions``.

    Raises:
        DataError: unreadable file, missing column, malformed row, unknown label or a repeated id.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, f"{role} file not found")
    try:
        if path.suffix.lower() == ".json":
            records = read_json(path, ("label", "pred_label") if role == "gold" else ("pred_label", "label"))
        else:
            records = read_csv(path)
    except (OSError, UnicodeDecodeError) as error:  # unreadable, or not UTF-8: one line naming the file
        raise DataError(path, None, str(error)) from None
    by_id: dict[str, ClaimRecord] = {}
    for record in records:
        if record.id in by_id:
            raise DataError(path, None, f"claim id {record.id!r} appears twice", "id")
        if role == "gold" and not record.pairs:
            raise DataError(path, None, f"gold claim {record.id!r} has no QA pairs (its score is undefined)", "evi")
        by_id[record.id] = record
    return by_id


def evaluate(gold: dict[str, ClaimRecord], predictions: dict[str, ClaimRecord],
             threshold: float = OLD_AVERITEC_THRESHOLD, progress: bool = False) -> tuple[dict[str, Any],
                                                                                         list[ClaimScore]]:
    """Score every gold claim against the prediction with its id (none: no pairs, no label)."""
    ensure_nltk_data()
    claims = []
    for claim_id, record in tqdm(gold.items(), desc="claims", disable=not progress):
        prediction = predictions.get(claim_id)
        claims.append(score_claim(claim_id, record.label, record.pairs,
                                  prediction.label if prediction else None,
                                  prediction.pairs if prediction else [], threshold=threshold))
    metrics = aggregate(claims)
    metrics["n_errors"] = metrics["n_missing_predictions"]  # no row: a failed claim, scored 0 and counted wrong
    metrics["old_averitec_threshold"] = threshold
    metrics["n_predictions_not_in_gold"] = len(set(predictions) - set(gold))
    return metrics, claims


def per_claim_rows(claims: Sequence[ClaimScore], gold: dict[str, ClaimRecord],
                   predictions: dict[str, ClaimRecord]) -> list[dict[str, Any]]:
    rows = []
    for c in claims:
        pred = predictions.get(c.id)
        rows.append({"id": c.id, "gold_label": c.gold_label, "pred_label": c.pred_label, "q_only": c.q_only,
                     "qa": c.qa, "counted": c.counted, "gold_pairs": len(flat_pairs(gold[c.id].pairs)),
                     "pred_pairs_scored": min(len(flat_pairs(pred.pairs)), MAX_PREDICTED_PAIRS) if pred else 0})
    return rows


def make_parser() -> Any:
    return parser_for((AveritecEvalArgs, Ev2RSettings, EngineConfig), prog="veracity eval averitec")


def evaluate_ev2r(gold: dict[str, ClaimRecord], predictions: dict[str, ClaimRecord], settings: Ev2RSettings,
                  engine_config: EngineConfig, rows: list[dict[str, Any]],
                  run_dir: str | Path | None = None) -> dict[str, Any]:
    """Ev²R on the first ``ev2r_max_claims`` gold claims; adds per-claim judge outcomes to ``rows``. ``run_dir``:
    whose ``run_config.yaml`` gets the judge's ``decoding`` (before judging, and again after, with what the engine
    learned from its server)."""
    chosen = list(gold)[: settings.ev2r_max_claims] if settings.ev2r_max_claims else list(gold)
    claims = []
    for claim_id in chosen:
        record, pred = gold[claim_id], predictions.get(claim_id)
        claim_text = record.claim or (pred.claim if pred else "")
        claims.append((claim_id, claim_text, record.label, record.pairs, pred.label if pred else None,
                       pred.pairs if pred else []))
    kinds = ["json_schema"] if settings.ev2r_constrained else []
    engine = DecodingTally(make_engine(engine_config), kinds)  # counts what each answer was made under
    try:
        if run_dir is not None:
            record_facts(run_dir, decoding=engine.decoding(kinds))  # what the judge expects, before work
        scored = score_claims(engine, claims, settings)
    finally:
        if run_dir is not None:
            record_facts(run_dir, decoding=summarise_facts(engine.facts) or engine.decoding(kinds))
        engine.close()
    by_id = {row["id"]: row for row in rows}
    for claim in scored:
        by_id[claim.id].update(ev2r_qa=claim.qa.to_dict(), ev2r_q_only=claim.q_only.to_dict(),
                               ev2r_counted=claim.counted(settings.ev2r_threshold))
    metrics = aggregate_ev2r(scored, settings.ev2r_threshold)
    metrics["ev2r_judge"] = f"{engine_config.engine}:{engine_config.model}"
    if metrics["ev2r_qa_judge_failures"] or metrics["ev2r_q_judge_failures"]:
        logger.warning("Ev²R judge failed on %d (Q+A) and %d (Q-only) of %d claims: recorded, left out of the means",
                       metrics["ev2r_qa_judge_failures"], metrics["ev2r_q_judge_failures"], len(scored))
    return metrics


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``veracity eval averitec``; a bad gold or predictions file is a :class:`DataError` (``veracity.cli`` prints
    it and exits with status 2), raised before anything is written."""
    args, ev2r_settings, engine_config = parse_config(make_parser(), argv)
    gold = read_claims(args.gold, "gold")
    predictions = read_claims(args.predictions, "predictions")
    write_run_config(args.output_dir, args, *((ev2r_settings, engine_config) if ev2r_settings.ev2r else ()),
                     job="eval averitec", device=resolve_device(engine_config.device) if ev2r_settings.ev2r else None)
    started = time.perf_counter()
    metrics, claims = evaluate(gold, predictions, args.threshold, args.progress)
    metrics["seconds"] = round(time.perf_counter() - started, 1)
    if metrics["n_missing_predictions"]:
        logger.warning("%d gold claims have no prediction (scored 0, counted wrong)", metrics["n_missing_predictions"])
    out = Path(args.output_dir)
    rows = per_claim_rows(claims, gold, predictions)
    if ev2r_settings.ev2r:
        started = time.perf_counter()
        metrics.update(evaluate_ev2r(gold, predictions, ev2r_settings, engine_config, rows, args.output_dir))
        metrics["ev2r_seconds"] = round(time.perf_counter() - started, 1)
    write_jsonl(out / "per_claim.jsonl", rows)
    write_json(out / "metrics.json", metrics)
    print(" ".join(f"{key}={metrics[key]:.4f}" for key in
                   ("q_only", "qa", "old_averitec_score", "label_accuracy", "macro_f1")) + f" n={metrics['n']}")
    if ev2r_settings.ev2r:
        print(" ".join(f"{key}={metrics[key]:.4f}" if isinstance(metrics[key], float) else f"{key}={metrics[key]}"
                       for key in ("ev2r_q_only_recall", "ev2r_qa_recall", "ev2r_new_averitec_score", "ev2r_n",
                                   "ev2r_qa_judge_failures", "ev2r_q_judge_failures")))
    return metrics
