"""AIC CTU FEVER-8 batch inference: long-context RAG, one LLM call per claim (SPEC §2).

Usage: veracity infer aic --config configs/pipelines/aic_embedded.yaml [--max_examples 16]
                          [--knowledge_store DIR] [--proxy_own_documents false] [--output_dir runs/aic/x]

Claims are the prepared AVeriTeC records (``--claims_source averitec_dev``, official id order). Without
``--knowledge_store`` a proxy store is built in ``<output_dir>/store`` (see ``store.py``: each claim's own QA
answers under their URLs plus other claims' documents; ``--proxy_own_documents false`` = distractors only).
Writes ``records.jsonl`` (one record per claim, resumable; sharded: ``records.shard-i-of-n.jsonl``),
``predictions.json`` (AVeriTeC JSON), ``submission.csv`` (FEVER-8 ``id,claim,evi,label,split``), ``gold.json``
(the same claims' gold in the official layout), ``failures.jsonl``, ``summary.json`` (seconds per claim per stage)
and ``run_config.yaml``; unsharded runs end with ``veracity eval averitec`` into ``<output_dir>/eval``.
The output files come from this run's own records only: ``records.jsonl`` unsharded, every
``records.shard-j-of-n.jsonl`` of an i/n layout (the shards of one run), and only of the claims it runs; a file of
another layout left in the folder is never read, and a resume is refused when any file of the layout was made
under another config.
A claim whose answer never parses is a failure: it has no row in the outputs, so the scorer counts it wrong.
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.infer.pipelines.aic.config import AICConfig
from veracity.infer.pipelines.aic.pipeline import STAGES
from veracity.infer.pipelines.aic.scoring import QAPair, format_evi
from veracity.models.engine import EngineConfig

logger = logging.getLogger(__name__)
CSV_HEADER = ("id", "claim", "evi", "label", "split")


def make_parser() -> Any:
    from veracity.config import make_parser as parser

    return parser((AICConfig, EngineConfig), prog="veracity infer aic")


def store_claim_id(record_id: str) -> str:
    """``dev-17`` → ``17``: the official claim id (store file name, CSV ``id``)."""
    return record_id.rsplit("-", 1)[-1]


def _position(claim: Any) -> tuple[int, str]:
    tail = store_claim_id(claim.id)
    return (int(tail), claim.id) if tail.isdigit() else (sys.maxsize, claim.id)


def load_claims(config: AICConfig) -> tuple[list[Any], list[Any], list[Any]]:
    """(pool of all claims of the source, the claims to run, the train claims for few-shot)."""
    from veracity.data_prep.prepared import read_prepared
    from veracity.data_prep.schema import AveritecClaim

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


def records_name(shard: tuple[int, int]) -> str:
    """The batch output of one shard: ``records.jsonl`` unsharded, ``records.shard-i-of-n.jsonl`` for shard i/n."""
    i, n = shard
    return "records.jsonl" if n == 1 else f"records.shard-{i}-of-{n}.jsonl"


def layout_files(out: Path, shard: tuple[int, int]) -> list[Path]:
    """The batch outputs a run owns: ``records.jsonl`` unsharded; the n files of an i/n layout (its shards are
    one run together). Records of another layout left in the folder (an older sharded or unsharded run) are not
    this run's and are never read."""
    n = shard[1]
    return [out / records_name((i, n)) for i in range(n)]


def read_records(out: Path, shard: tuple[int, int], ids: Sequence[str]) -> list[dict[str, Any]]:
    """The records of claims ``ids`` in the files of this run's layout (``infer.batch.latest_records``: the last
    record of an id wins), in claim-id order."""
    from veracity.infer.batch import latest_records

    wanted = set(ids)
    latest: dict[str, dict[str, Any]] = {}
    for path in layout_files(out, shard):
        if path.is_file():
            latest.update((r["id"], r) for r in latest_records(path, what="an AIC record") if r["id"] in wanted)
    return sorted(latest.values(), key=lambda r: (int(r["id"]) if str(r["id"]).isdigit() else sys.maxsize, r["id"]))


def write_outputs(out: Path, records: list[dict[str, Any]]) -> dict[str, int]:
    """predictions.json, submission.csv and failures.jsonl from the batch records."""
    from veracity.io import atomic_writer, write_json, write_jsonl

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
            pairs = [QAPair(e["question"], e["answer"]) for e in p["evidence"]]
            writer.writerow([p["claim_id"], p["claim"], format_evi(pairs), p["pred_label"], "pred"])
    write_jsonl(out / "failures.jsonl", failures)
    return {"answered": len(answered), "failed": len(failures)}


def retrieval_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How much of what was retrieved came from the claim's own documents (proxy stores mark them)."""
    results = [r["result"] for r in records if r["status"] == "ok"]
    if not results:
        return {}
    n = len(results)
    return {"claims": n, "mean_chunks": round(sum(r["n_chunks"] for r in results) / n, 2),
            "mean_sources": round(sum(len(r["sources"]) for r in results) / n, 2),
            "mean_own_sources": round(sum(r["own_sources"] for r in results) / n, 2),
            "claims_with_an_own_source": round(sum(r["own_sources"] > 0 for r in results) / n, 4)}


def seconds_per_claim(records: list[dict[str, Any]]) -> dict[str, float]:
    """Mean seconds per claim of each stage over every recorded claim (resumed runs included)."""
    results = [r["result"] for r in records if r["status"] == "ok"]
    return {s: round(sum(r["seconds"][s] for r in results) / max(len(results), 1), 3) for s in STAGES}


def run(config: AICConfig, engine_config: EngineConfig) -> dict[str, Any]:
    """Run AIC with parsed settings (what ``main`` does after parsing)."""
    from veracity.data_prep.errors import DataError
    from veracity.data_prep.prepared import PreparedDataError
    from veracity.infer.batch import parse_shard, run_batch
    from veracity.infer.pipelines.aic.pipeline import AICPipeline
    from veracity.infer.pipelines.aic.store import KnowledgeStore, build_proxy_store
    from veracity.io import write_json
    from veracity.models.engine import make_engine
    from veracity.rundir import RunConfigMismatchError, check_resume, to_plain, write_run_config

    shard = parse_shard(config.shard)
    out = Path(config.output_dir)
    engine = None
    try:
        pool, targets, train = load_claims(config)
        name = records_name(shard)
        engine = make_engine(engine_config)
        models = {"generator": engine.identity}
        for sibling in layout_files(out, shard):  # the outputs read every shard of the layout: so does the check
            if sibling.name != name:
                check_resume(out / "run_config.yaml", sibling, [to_plain(config), to_plain(engine_config)], models)
        write_run_config(out, config, engine_config, job="infer aic", resumes=out / name, models=models)
        store_report: dict[str, Any] = {"knowledge_store": config.knowledge_store}
        if config.knowledge_store is None:
            store_dir = out / ("store" if config.proxy_own_documents else "store_distractors_only")
            store_report = {"knowledge_store": str(store_dir), "proxy": True,
                            **build_proxy_store(pool, [c.id for c in targets], store_dir,
                                                own=config.proxy_own_documents,
                                                distractors=config.proxy_distractor_claims,
                                                mode=config.proxy_distractors, seed=config.proxy_seed,
                                                store_id=store_claim_id)}
        store = KnowledgeStore(store_report["knowledge_store"])
    except (DataError, PreparedDataError, RunConfigMismatchError) as error:
        if engine is not None:
            engine.close()
        print(f"veracity infer aic: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    items = [{"id": store_claim_id(c.id), "record_id": c.id, "claim": c.claim, "gold": c.label} for c in targets]
    # a claim without gold QA pairs has no evidence score (the scorer refuses it): it runs, but is not in gold.json
    write_json(out / "gold.json", [gold_record(c) for c in targets if any(p.answers for p in c.questions)])
    store_report["claims_without_gold_evidence"] = sum(not any(p.answers for p in c.questions) for c in targets)
    pipeline = AICPipeline(config, engine_config, store, train, engine=engine)
    try:
        summary = run_batch(items, pipeline, out / name, shard=shard, batch_size=config.claims_per_call,
                            progress=config.progress)
    finally:
        pipeline.close()
    records = read_records(out, shard, [item["id"] for item in items])
    counts = write_outputs(out, records)
    report = {**summary.to_dict(), **counts, "store": store_report, "retrieval": retrieval_stats(records),
              "seconds_per_claim": seconds_per_claim(records),
              "indexes_built": pipeline.indexes.built, "indexes_reused": pipeline.indexes.reused}
    report["seconds_per_claim"]["total"] = round(sum(report["seconds_per_claim"].values()), 3)
    write_json(out / "summary.json", report)
    print(summary)
    print(f"retrieval: {report['retrieval']}")
    print(f"answered {counts['answered']}, failed {counts['failed']}; seconds per claim: " +
          ", ".join(f"{k} {v:.2f}" for k, v in report["seconds_per_claim"].items()))
    if shard[1] == 1 and config.evaluate:
        from veracity.infer.eval.averitec import main as evaluate

        report["metrics"] = evaluate(["--predictions", str(out / "submission.csv"), "--gold", str(out / "gold.json"),
                                      "--output_dir", str(out / "eval"), "--progress", "false"])
    return json.loads(json.dumps(report))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from veracity.config import parse_config

    return run(*parse_config(make_parser(), argv))
