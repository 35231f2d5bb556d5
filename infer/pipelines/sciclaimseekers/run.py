"""SciClaimSeekers batch inference: source retrieval for social-media posts (SPEC §3), and its ablation table.

Usage: veracity infer sciclaim --config configs/pipelines/sciclaimseekers_embedded.yaml --posts posts.tsv
                               --collection collection.jsonl --output_dir runs/sciclaim [--reranker cross_encoder]
       veracity infer sciclaim --config configs/pipelines/sciclaimseekers_embedded.yaml --prepared_dir runs/prep
                               --task climate_fever --split dev --ablation true --output_dir runs/sciclaim/cf

Writes ``submission.tsv`` (``post_id<TAB>[uid1, …, uid5]``), ``records.jsonl`` (per post: both retrievers' heads,
the RRF candidates with scores, every LLM answer and its parsed score or every cross-encoder score, the final
ranking), ``summary.json`` (seconds, pairs/s, unparsable answers) and, when the posts carry gold ids,
``metrics.json`` from ``veracity eval sciclaim``. With ``--ablation true``: one submission per configuration under
``submissions/`` and ``metrics.json`` with ``rows: {configuration: {mrr@5, hit@1, hit@5}}`` (+ ``results.md``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.data_prep.checkthat_files import Post
from veracity.infer.pipelines.sciclaimseekers.config import SciClaimConfig
from veracity.infer.pipelines.sciclaimseekers.pipeline import FirstStage, SciClaimPipeline
from veracity.infer.pipelines.sciclaimseekers.ranking import interpolate_scores
from veracity.infer.retrieval.fusion import Hits, alpha_fusion, reciprocal_rank_fusion
from veracity.models.engine import EngineConfig

logger = logging.getLogger(__name__)
METRICS = ("mrr@5", "hit@1", "hit@5")


def make_parser() -> Any:
    from veracity.config import make_parser as parser

    return parser((SciClaimConfig, EngineConfig), prog="veracity infer sciclaim")


def resolve_inputs(config: SciClaimConfig) -> tuple[Path, Path]:
    """(posts, collection): the files given, or those of a task built from prepared records."""
    if config.posts and config.collection:
        return Path(config.posts), Path(config.collection)
    if not config.task:
        raise ValueError("give --posts and --collection, or --task (with --prepared_dir)")
    from veracity.data_prep.sciclaim_tasks import build_task

    paths = build_task(config.prepared_dir, config.task, Path(config.output_dir) / "task")
    if config.split not in paths:
        splits = sorted(set(paths) - {"collection"})
        raise ValueError(f"task {config.task!r} has no split {config.split!r} (has {splits})")
    return paths[config.split], paths["collection"]


def top_ids(hits: Hits, top: int) -> list[str]:
    """The first ``top`` doc ids of a ranking."""
    return [doc for doc, _ in hits[:top]]


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def score_rankings(rankings: dict[str, list[str]], posts: Sequence[Post]) -> dict[str, float]:
    """MRR@5, hit@1, hit@5 of post_id → ranked ids against the posts' gold ids (CheckThat definition)."""
    from veracity.infer.eval.sciclaim import checkthat_scores

    scores = checkthat_scores(rankings, {p.post_id: p.gold for p in posts})
    return {m: round(float(scores[m]), 4) for m in METRICS}


def fuse_back(reranked: Hits, stage: FirstStage, config: SciClaimConfig) -> Hits:
    """The reranker's order as a third ranking beside BM25's and dense's, fused by RRF k (``rerank_fusion``)."""
    return reciprocal_rank_fusion([reranked, stage.sparse, stage.dense], config.rrf_k, config.fusion_depth)


def interpolate(scores: dict[str, float], stage: FirstStage, config: SciClaimConfig) -> Hits:
    """The reranker's scores of the RRF head summed with the first stage's (``rerank_*_weight``)."""
    return interpolate_scores([d for d, _ in stage.fused], scores, stage.sparse, stage.dense,
                              config.rerank_dense_weight, config.rerank_bm25_weight)


def interpolated_name(config: SciClaimConfig) -> str:
    return f"interpolated (dense {config.rerank_dense_weight:g}, BM25 {config.rerank_bm25_weight:g})"


def run_pipeline(config: SciClaimConfig, pipeline: SciClaimPipeline, posts: Sequence[Post],
                 stages: Sequence[FirstStage]) -> tuple[dict[str, list[str]], list[dict[str, Any]]]:
    """The configured reranker over every post: (post_id → top ids, one record per post)."""
    from tqdm.auto import tqdm

    rankings, records = {}, []
    for post, stage in tqdm(list(zip(posts, stages, strict=True)), desc=f"rerank ({config.reranker})", unit="post",
                            disable=not config.progress):
        answers, scores = None, {}
        if config.reranker == "llm":
            final, answers = pipeline.llm_rerank(post, stage.fused)
            scores = {a["doc_id"]: a["score"] for a in answers if a["score"] is not None}
        elif config.reranker == "cross_encoder":
            final = pipeline.cross_encoder_rerank(post, stage.fused)
            scores = dict(final)
        else:
            final = stage.fused
        if config.reranker != "none":
            if config.rerank_fusion:
                final = fuse_back(final, stage, config)
            elif config.interpolates:
                final = interpolate(scores, stage, config)
        rankings[post.post_id] = top_ids(final, config.top_k)
        records.append({"post_id": post.post_id, "text": post.text, "gold": post.gold,
                        "bm25": top_ids(stage.sparse, 10), "dense": top_ids(stage.dense, 10),
                        "rrf": [[d, round(s, 6)] for d, s in stage.fused], "llm_answers": answers,
                        "cross_encoder_scores": {d: round(v, 4) for d, v in scores.items()}
                        if config.reranker == "cross_encoder" else None,
                        "ranking": [[d, round(s, 6)] for d, s in final[: config.top_k]]})
    return rankings, records


def run_ablation(config: SciClaimConfig, pipeline: SciClaimPipeline, posts: Sequence[Post],
                 stages: Sequence[FirstStage], out: Path) -> dict[str, Any]:
    """Every configuration of the paper's Table 2 (+ α-fusion) on the same first-stage lists."""
    from tqdm.auto import tqdm

    from veracity.data_prep.checkthat_files import write_submission

    k = config.top_k
    rrf = f"RRF k={config.rrf_k}"
    alpha = f"α-fusion α={config.alpha:g}"
    alpha_heads = [alpha_fusion(s.sparse, s.dense, config.alpha, config.fusion_depth) for s in stages]
    runs: dict[str, dict[str, list[str]]] = {
        "BM25": {p.post_id: top_ids(s.sparse, k) for p, s in zip(posts, stages, strict=True)},
        "dense": {p.post_id: top_ids(s.dense, k) for p, s in zip(posts, stages, strict=True)},
        rrf: {p.post_id: top_ids(s.fused, k) for p, s in zip(posts, stages, strict=True)},
        alpha: {p.post_id: top_ids(head, k) for p, head in zip(posts, alpha_heads, strict=True)},
    }
    # the cross-encoder over each fusion's head (the paper reranks RRF's; α-fusion's is the R2VC first stage)
    for name, heads in ((rrf, [s.fused for s in stages]), (alpha, alpha_heads)):
        reranked = [pipeline.cross_encoder_rerank(p, head) for p, head in tqdm(
            list(zip(posts, heads, strict=True)), desc=f"cross-encoder ({name})", disable=not config.progress)]
        runs[f"{name} + cross-encoder@{config.fusion_depth}"] = {
            p.post_id: top_ids(r, k) for p, r in zip(posts, reranked, strict=True)}
        if name == rrf:  # the same scores combined with the first stage (rerank_fusion, rerank_*_weight): no new calls
            runs[f"{name} + cross-encoder@{config.fusion_depth}, fused back"] = {
                p.post_id: top_ids(fuse_back(r, s, config), k)
                for p, r, s in zip(posts, reranked, stages, strict=True)}
            if config.interpolates:
                runs[f"{name} + cross-encoder@{config.fusion_depth}, {interpolated_name(config)}"] = {
                    p.post_id: top_ids(interpolate(dict(r), s, config), k)
                    for p, r, s in zip(posts, reranked, stages, strict=True)}
    n_llm = min(config.ablation_llm_posts or len(posts), len(posts))
    llm_posts = list(posts[:n_llm])
    llm_name = f"{rrf} + LLM rerank@{config.fusion_depth}"

    def table() -> dict[str, Any]:
        rows, counts = {}, {}
        for name, rankings in runs.items():
            scored = llm_posts if name == llm_name else posts
            label = name if len(scored) == len(posts) else f"{name} (first {n_llm} posts)"
            rows[label], counts[label] = score_rankings(rankings, scored), len(scored)
            write_submission(out / "submissions" / f"{_slug(name)}.tsv", rankings, k)
        if n_llm < len(posts):  # the other configurations on the LLM subset, so that its row has neighbours
            for name, rankings in runs.items():
                if name != llm_name:
                    label = f"{name} (first {n_llm} posts)"
                    rows[label], counts[label] = score_rankings(rankings, llm_posts), n_llm
        return {"rows": rows, "n": counts, "llm_rerank": pipeline.llm_stats.to_dict(),
                "cross_encoder": pipeline.cross_encoder_stats.to_dict()}

    from veracity.io import write_json

    write_json(out / "metrics.partial.json", table())  # every row but the slow LLM one, in case it is stopped
    runs[llm_name] = {p.post_id: top_ids(pipeline.llm_rerank(p, s.fused)[0], k)
                      for p, s in tqdm(list(zip(llm_posts, stages[:n_llm], strict=True)), desc="LLM rerank",
                                       disable=not config.progress)}
    (out / "metrics.partial.json").unlink(missing_ok=True)
    return table()


def markdown_table(result: dict[str, Any]) -> str:
    lines = ["| configuration | posts | " + " | ".join(METRICS) + " |", "|---|---:|" + "---:|" * len(METRICS)]
    for label, metrics in result["rows"].items():
        lines.append(f"| {label} | {result['n'][label]} | " + " | ".join(f"{metrics[m]:.3f}" for m in METRICS) + " |")
    return "\n".join(lines)


def run(config: SciClaimConfig, engine_config: EngineConfig) -> dict[str, Any]:
    """Run the pipeline (or the ablation) with parsed settings."""
    import sys

    from veracity.data_prep.checkthat_files import read_collection, read_posts, write_submission
    from veracity.data_prep.errors import DataError
    from veracity.data_prep.prepared import PreparedDataError
    from veracity.io import write_json, write_jsonl
    from veracity.rundir import write_run_config

    out = Path(config.output_dir)
    try:
        posts_path, collection_path = resolve_inputs(config)
        posts = read_posts(posts_path)[: config.max_examples or None]
        papers = read_collection(collection_path)
        if config.ablation and not all(p.gold for p in posts):
            raise DataError(posts_path, None, "--ablation needs a gold id for every post", field="cord_uid")
    except (DataError, PreparedDataError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    write_run_config(out, config, engine_config, job="infer sciclaim")
    rerankers = ("llm", "cross_encoder") if config.ablation else (config.reranker,)
    pipeline = SciClaimPipeline(config, engine_config, papers, rerankers)
    try:
        start = time.perf_counter()
        stages = pipeline.first_stage(posts)
        first_seconds = time.perf_counter() - start
        summary: dict[str, Any] = {"posts": len(posts), "papers": len(papers), "posts_file": str(posts_path),
                                   "collection": str(collection_path),
                                   "first_stage_seconds": round(first_seconds, 2)}
        if config.ablation:
            result = {**summary, **run_ablation(config, pipeline, posts, stages, out)}
            write_json(out / "metrics.json", result)
            table = markdown_table(result)
            (out / "results.md").write_text(table + "\n", encoding="utf-8")
            print(table)
            return result
        rankings, records = run_pipeline(config, pipeline, posts, stages)
    finally:
        pipeline.close()
    write_submission(out / "submission.tsv", rankings, config.top_k)
    write_jsonl(out / "records.jsonl", records)
    summary.update(reranker=config.reranker, llm_rerank=pipeline.llm_stats.to_dict(),
                   cross_encoder=pipeline.cross_encoder_stats.to_dict())
    write_json(out / "summary.json", summary)
    if config.reranker == "llm":
        print(f"LLM rerank: {pipeline.llm_stats.pairs} pairs, {pipeline.llm_stats.unparsable} unparsable answers "
              "(kept in their RRF slot)")
    if all(p.gold for p in posts):
        from veracity.infer.eval.sciclaim import main as evaluate

        summary["metrics"] = evaluate(["--submission", str(out / "submission.tsv"), "--gold", str(posts_path),
                                       "--output_dir", str(out), "--only_submitted", "true"])
    return summary


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from veracity.config import parse_config

    return run(*parse_config(make_parser(), argv))
