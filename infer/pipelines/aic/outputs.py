"""AIC's claims and the FEVER-8 files a run makes from its records.

``load_claims`` reads the prepared AVeriTeC claims in the official id order (``dev-0``, ``dev-1``, …); ``gold_record``
writes one back in the official JSON layout (``gold.json``, what ``veracity eval averitec`` reads as gold);
``write_outputs`` turns the batch records into ``predictions.json`` (AVeriTeC JSON), ``submission.csv`` (FEVER-8
``id,claim,evi,label,split``) and ``failures.jsonl``. A claim whose answer never parsed, or whose record is an
error, is a failure: it has no row, so the scorer counts it wrong.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

from veracity.data_prep.averitec import format_fever8_evidence, qa_pair
from veracity.data_prep.prepared import read_prepared
from veracity.data_prep.schema import AveritecClaim
from veracity.infer.pipelines.aic.config import AICConfig
from veracity.io import atomic_writer, write_json, write_jsonl

CSV_HEADER = ("id", "claim", "evi", "label", "split")


def store_claim_id(record_id: str) -> str:
    """``dev-17`` → ``17``: the official claim id (store file name, CSV ``id``)."""
    return record_id.rsplit("-", 1)[-1]


def _position(claim: Any) -> tuple[int, str]:
    tail = store_claim_id(claim.id)
    return (int(tail), claim.id) if tail.isdigit() else (sys.maxsize, claim.id)


def load_claims(config: AICConfig) -> tuple[list[Any], list[Any], list[Any]]:
    """(pool of all claims of the source, the claims to run, the train claims for few-shot)."""
    pool = sorted((c for c in read_prepared(config.prepared_dir, config.claims_source)
                   if isinstance(c, AveritecClaim)), key=_position)
    targets = pool[: config.max_examples] if config.max_examples else pool
    train = [c for c in read_prepared(config.prepared_dir, config.train_source) if isinstance(c, AveritecClaim)] \
        if config.few_shot > 0 else []
    return pool, targets, train


def gold_record(claim: Any) -> dict[str, Any]:
    """A prepared AveritecClaim back in the official JSON layout (what ``veracity eval averitec`` reads as gold)."""
    questions = []
    for pair in claim.questions:
        answers = []
        for a in pair.answers:
            answer = {"answer": a.answer, "answer_type": a.answer_type, "source_url": a.source_url}
            if a.answer_type == "Boolean" and a.boolean_explanation:
                answer["boolean_explanation"] = a.boolean_explanation
            answers.append(answer)
        questions.append({"question": pair.question, "answers": answers})
    return {"claim_id": store_claim_id(claim.id), "claim": claim.claim, "label": claim.label, "questions": questions}


def write_outputs(out: Path, records: list[dict[str, Any]]) -> dict[str, int]:
    """predictions.json, submission.csv and failures.jsonl from the batch records."""
    answered = [r["result"] for r in records if r["status"] == "ok" and r["result"]["status"] == "answered"]
    failures = [{"id": r["id"], "failure": r["result"]["failure"] if r["status"] == "ok" else r["error"],
                 "attempts": r["result"]["attempts"] if r["status"] == "ok" else []}
                for r in records if r["status"] != "ok" or r["result"]["status"] != "answered"]
    predictions = [{"claim_id": r["id"], "claim": r["claim"], "pred_label": r["label"],
                    "evidence": [{"question": q["question"], "answer": q["answer"], "url": q["url"],
                                  "answer_type": q["answer_type"],
                                  "scraped_text": r["sources"][q["source"] - 1]["text"] if q["source"] else None}
                                 for q in r["answer"]["questions"]]} for r in answered]
    write_json(out / "predictions.json", predictions)
    with atomic_writer(out / "submission.csv") as handle:
        # csv's default dialect is the leaderboard files' own: CRLF rows, fields quoted only when needed
        writer = csv.writer(handle)
        writer.writerow(CSV_HEADER)
        for p in predictions:
            pairs = [qa_pair(e["question"], e["answer"]) for e in p["evidence"]]
            writer.writerow([p["claim_id"], p["claim"], format_fever8_evidence(pairs), p["pred_label"], "pred"])
    write_jsonl(out / "failures.jsonl", failures)
    return {"answered": len(answered), "failed": len(failures)}
