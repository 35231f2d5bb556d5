"""Retrieval evaluation on the claim → evidence benchmarks that ``veracity prep`` builds.

Usage: veracity eval retrieval [--config configs/retrieval/benchmarks.yaml] [--benchmarks climate_fever]

For each benchmark (``<prepared_dir>/<name>_corpus.jsonl`` + ``<name>_queries.jsonl``) it builds (or reuses) the
index, retrieves once per retriever, and scores BM25, dense, α-fusion for each α, α* (the α with the best
nDCG@10 on the *tuning* split, so the reported split is never tuned on), RRF, and the reranked variants.
Writes ``metrics.json`` and ``results.md`` (one Markdown table per benchmark) in the run directory, and, as IR
tools expect them, ``trec/<benchmark>/<configuration>.run`` (TREC run files: ``qid Q0 docid rank score tag``),
``trec/<benchmark>.qrels`` (``qid 0 docid 1``) and ``per_query/<benchmark>.jsonl`` (every metric of every query
and configuration). Each configuration's nDCG@10 is compared with the best one's by a paired randomization test
over the queries; the table marks differences the test does not support (p >= 0.05) with ``≈``. The tuned α* is
kept for reuse: ``search/<benchmark>.yaml`` is a recipe for ``veracity index search --config``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.prepared import prepared_path, read_prepared
from veracity.infer.retrieval.dense import DenseEncoder
from veracity.infer.retrieval.fusion import DEFAULT_ALPHA, DEFAULT_RRF_K, Hits
from veracity.infer.retrieval.index import IndexMismatchError, IndexSettings, LoadedIndex, build_index, load_index
from veracity.infer.retrieval.metrics import paired_randomization_test, per_query_metrics, retrieval_metrics
from veracity.infer.retrieval.rerank import CrossEncoderReranker
from veracity.infer.retrieval.searcher import Searcher, SearchSettings, combine
from veracity.io import atomic_writer, write_json, write_jsonl
from veracity.rundir import write_run_config

logger = logging.getLogger(__name__)
TABLE_METRICS = ("recall@5", "recall@20", "mrr@5", "hit@1", "hit@5", "ndcg@10")
SIGNIFICANCE_METRIC, SIGNIFICANCE_LEVEL = "ndcg@10", 0.05


@dataclass
class RetrievalEvalConfig:
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep."})
    benchmarks: list[str] = field(default_factory=lambda: ["climate_fever", "fever_evidence"], metadata={
        "help": "Claim → evidence benchmarks (built by veracity prep) to evaluate."})
    output_dir: str = field(default="runs/eval_retrieval", metadata={"help": "Run directory."})
    eval_split: str = field(default="dev", metadata={"help": "Split reported."})
    tune_split: str = field(default="train", metadata={"help": "Split on which α* is chosen."})
    alphas: list[float] = field(default_factory=lambda: [0.2, 0.3, 0.5, 0.7, 0.8], metadata={
        "help": "BM25 weights α tried in α-fusion; α* is chosen on --tune_split."})
    rrf_k: int = field(default=DEFAULT_RRF_K, metadata={"help": "RRF constant k."})
    candidates: int = field(default=100, metadata={"help": "Hits per retriever before fusion."})
    rerank: bool = field(default=True, metadata={"help": "Add cross-encoder reranked rows."})
    reranker: str = field(default="embedded", metadata={"help": "Reranker: 'embedded', 'real', path or hub id."})
    rerank_top_n: int = field(default=20, metadata={"help": "How many fused hits the reranker re-scores."})
    max_queries: int | None = field(default=None, metadata={"help": "Cap per split (quick runs)."})


def load_queries(prepared: Path, name: str, split: str, limit: int | None) -> list[dict]:
    """The ``split`` queries of prepared output ``name`` (through the manifest), as plain dicts."""
    rows = [q.to_dict() for q in read_prepared(prepared, name, [split])]
    return rows[:limit] if limit else rows


def _index_for(corpus: Path, folder: Path, settings: IndexSettings) -> LoadedIndex:
    """The index in ``folder`` if it matches this corpus and encoder, else a fresh build (one encoder load)."""
    encoder = DenseEncoder(settings.encoder_spec()) if settings.dense else None
    try:
        return load_index(folder, corpus=corpus, encoder=encoder)
    except (FileNotFoundError, IndexMismatchError) as reason:
        logger.info("building index %s (%s)", folder, reason)
        build_index(corpus, folder, settings, encoder=encoder)
        return load_index(folder, corpus=corpus, encoder=encoder)


def _score(rankings: Sequence[Hits], queries: Sequence[dict]) -> dict[str, float]:
    return retrieval_metrics([[d for d, _ in hits] for hits in rankings], [set(q["gold_ids"]) for q in queries])


def evaluate_benchmark(name: str, config: RetrievalEvalConfig, settings: IndexSettings) -> dict[str, object]:
    prepared = Path(config.prepared_dir)
    evaluation = load_queries(prepared, f"{name}_queries", config.eval_split, config.max_queries)
    tuning = load_queries(prepared, f"{name}_queries", config.tune_split, config.max_queries)
    corpus = prepared_path(prepared, f"{name}_corpus")
    index = _index_for(corpus, Path(config.output_dir) / "index" / name, settings)
    search = SearchSettings(mode="rrf", candidates=config.candidates, rrf_k=config.rrf_k, top_k=config.candidates)
    searcher = Searcher(index, search)
    start = time.perf_counter()
    sparse, dense = searcher.retrieve_each([q["text"] for q in evaluation + tuning])
    seconds = time.perf_counter() - start
    ev_sparse, ev_dense = sparse[: len(evaluation)], dense[: len(evaluation)]
    tn_sparse, tn_dense = sparse[len(evaluation):], dense[len(evaluation):]
    top = config.candidates

    def fused(mode: str, alpha: float, sp: list[Hits], de: list[Hits]) -> list[Hits]:
        return [combine(mode, s, d, alpha, config.rrf_k, top) for s, d in zip(sp, de, strict=True)]

    tuned = {a: _score(fused("alpha", a, tn_sparse, tn_dense), tuning)["ndcg@10"] for a in config.alphas}
    best_alpha = max(tuned, key=lambda a: (tuned[a], -abs(a - DEFAULT_ALPHA)))  # ties: the default
    rows: dict[str, list[Hits]] = {
        "BM25": fused("bm25", 0, ev_sparse, ev_dense),
        "dense": fused("dense", 0, ev_sparse, ev_dense),
        **{f"α={a:g}": fused("alpha", a, ev_sparse, ev_dense) for a in config.alphas},
        f"α*={best_alpha:g} (tuned on {config.tune_split})": fused("alpha", best_alpha, ev_sparse, ev_dense),
        f"RRF k={config.rrf_k}": fused("rrf", 0, ev_sparse, ev_dense),
    }
    if config.rerank:
        reranker = CrossEncoderReranker(config.reranker)
        texts = index.texts()
        for label in (f"α*={best_alpha:g} (tuned on {config.tune_split})", f"RRF k={config.rrf_k}"):
            start_rr = time.perf_counter()
            rows[f"{label.split(' (')[0]} + rerank@{config.rerank_top_n}"] = [
                reranker.rerank(q["text"], hits, texts, config.rerank_top_n)
                for q, hits in zip(evaluation, rows[label], strict=True)
            ]
            logger.info("reranked %d queries in %.1f s", len(evaluation), time.perf_counter() - start_rr)
    scores = {label: _score(rankings, evaluation) for label, rankings in rows.items()}
    golds = [set(q["gold_ids"]) for q in evaluation]
    per_query = {label: per_query_metrics([[d for d, _ in hits] for hits in rankings], golds)
                 for label, rankings in rows.items()}
    write_trec(Path(config.output_dir), name, evaluation, rows, per_query)
    best = max(scores, key=lambda label: scores[label][SIGNIFICANCE_METRIC])
    reference = per_query[best][SIGNIFICANCE_METRIC]
    return {
        "benchmark": name,
        "corpus_documents": len(index.doc_ids),
        "queries": {config.eval_split: len(evaluation), config.tune_split: len(tuning)},
        "retrieval_seconds": round(seconds, 2),
        "alpha_tuning_ndcg@10": {f"{a:g}": round(v, 4) for a, v in tuned.items()},
        "best_alpha": best_alpha,
        "rows": scores,
        "significance": {
            "metric": SIGNIFICANCE_METRIC, "reference": best, "level": SIGNIFICANCE_LEVEL,
            "test": "paired randomization (sign flip) over queries, two-sided; exact up to 16 queries, else "
                    "10,000 seeded permutations",
            "p": {label: round(paired_randomization_test(per_query[label][SIGNIFICANCE_METRIC], reference), 4)
                  for label in rows},
        },
    }


def slug(label: str) -> str:
    """A file name and TREC tag for a configuration label: ``α*=0.5 (tuned on train) + rerank@20`` →
    ``alpha_star_0.5_tuned_on_train_rerank_20``."""
    text = label.replace("α", "alpha").replace("*", "_star").replace("=", "_")
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9.]+", "_", text)).strip("_")


def write_text(path: Path, text: str) -> None:
    with atomic_writer(path) as handle:
        handle.write(text)


def write_trec(out: Path, name: str, queries: Sequence[dict], rows: dict[str, list[Hits]],
               per_query: dict[str, dict[str, list[float]]]) -> None:
    """TREC run files per configuration, the qrels, and the per-query metrics of one benchmark."""
    qrels = "".join(f"{q['query_id']} 0 {doc} 1\n" for q in queries for doc in q["gold_ids"])
    write_text(out / "trec" / f"{name}.qrels", qrels)
    for label, rankings in rows.items():
        tag = slug(label)
        lines = [f"{q['query_id']} Q0 {doc} {rank} {score:.6f} {tag}\n"
                 for q, hits in zip(queries, rankings, strict=True) for rank, (doc, score) in enumerate(hits, 1)]
        write_text(out / "trec" / name / f"{tag}.run", "".join(lines))
    write_jsonl(out / "per_query" / f"{name}.jsonl", (
        {"query_id": q["query_id"], "configuration": label,
         **{metric: round(values[i], 6) for metric, values in per_query[label].items()}}
        for label in rows for i, q in enumerate(queries)))


def write_tuned_settings(path: Path, config: RetrievalEvalConfig, result: dict[str, object]) -> None:
    """``search/<benchmark>.yaml``: the settings this evaluation chose (α-fusion at the tuned α*, the evaluated
    depth and reranker) as a recipe for ``veracity index search --config``."""
    settings = SearchSettings(mode="alpha", alpha=float(result["best_alpha"]), rrf_k=config.rrf_k,  # type: ignore
                              candidates=config.candidates, rerank=config.rerank, reranker=config.reranker,
                              rerank_top_n=config.rerank_top_n)
    header = (f"# Tuned by `veracity eval retrieval` on {result['benchmark']} ({config.tune_split} split): "
              f"veracity index search --config {path} --index_dir ... --query ...\n")
    write_text(path, header + yaml.safe_dump(dataclasses.asdict(settings), sort_keys=False, allow_unicode=True))


def markdown_table(result: dict[str, object]) -> str:
    queries = result["queries"]
    significance = result.get("significance") or {}
    p_values = significance.get("p", {})  # type: ignore[union-attr]
    lines = [
        f"### {result['benchmark']} — {result['corpus_documents']} documents, {next(iter(queries.values()))} "  # type: ignore[attr-defined]
        f"{next(iter(queries))} queries",  # type: ignore[call-overload]
        "",
        "| configuration | " + " | ".join(TABLE_METRICS) + " | p vs best |",
        "|---|" + "---:|" * (len(TABLE_METRICS) + 1),
    ]
    reference = significance.get("reference")  # type: ignore[union-attr]
    for label, metrics in result["rows"].items():  # type: ignore[attr-defined]
        cells = []
        for m in TABLE_METRICS:
            unsupported = m == SIGNIFICANCE_METRIC and label != reference and p_values.get(label, 0) >= \
                SIGNIFICANCE_LEVEL
            cells.append(("≈ " if unsupported else "") + f"{metrics[m]:.3f}")
        p = "best" if label == reference else (f"{p_values[label]:.3f}" if label in p_values else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {p} |")
    if reference:
        lines += ["", f"≈: the {SIGNIFICANCE_METRIC} difference from the best row ({reference}) is not supported "
                      f"by a paired randomization test over the queries (p >= {SIGNIFICANCE_LEVEL})."]
    return "\n".join(lines)


def make_parser() -> Any:
    return parser_for((RetrievalEvalConfig, IndexSettings), "veracity eval retrieval")


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    config, settings = parse_config(make_parser(), argv)
    write_run_config(config.output_dir, config, settings, job="eval retrieval")
    results = {name: evaluate_benchmark(name, config, settings) for name in config.benchmarks}
    write_json(Path(config.output_dir) / "metrics.json", results)
    for name, result in results.items():
        write_tuned_settings(Path(config.output_dir) / "search" / f"{name}.yaml", config, result)
    tables = "\n\n".join(markdown_table(r) for r in results.values())
    (Path(config.output_dir) / "results.md").write_text(tables + "\n", encoding="utf-8")
    print(tables)
    return results
