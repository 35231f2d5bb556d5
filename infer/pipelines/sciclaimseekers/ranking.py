"""Pure re-ordering of the fused candidate list by reranker scores, on plain data, and the CheckThat scores of a
set of rankings (docs/pipelines/sciclaimseekers.md#reranker-and-first-stage)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from veracity.data_prep.checkthat_files import Post
from veracity.infer.eval.sciclaim import checkthat_scores
from veracity.infer.retrieval.fusion import Hits, minmax_normalize, reciprocal_rank_fusion

METRICS = ("mrr@5", "hit@1", "hit@5")


@dataclass
class FirstStage:
    """Each retriever's top ``candidates`` and the RRF head of one post."""

    sparse: Hits
    dense: Hits
    fused: Hits


def order_by_llm_scores(fused: Hits, scores: Sequence[int | None]) -> Hits:
    """Sort RRF candidates by their LLM score, ties broken by RRF score (then by RRF rank).

    A candidate whose answer did not parse (``None``) keeps its RRF position: it stays in its slot and the scored
    candidates are sorted into the remaining slots. So a list with no parsable answer is the RRF list unchanged.

    Args:
        fused: ``(doc_id, rrf_score)`` best first, as :func:`reciprocal_rank_fusion` returns it.
        scores: one 0–10 score (or None) per candidate, aligned with ``fused``.

    Returns:
        ``(doc_id, llm_score)`` best first; an unparsed candidate carries its RRF score (negated, so it never
        passes for an LLM score: -rrf < 0).
    """
    if len(fused) != len(scores):
        raise ValueError(f"{len(scores)} scores for {len(fused)} candidates")
    scored = [i for i, s in enumerate(scores) if s is not None]
    ranked = sorted(scored, key=lambda i: (-scores[i], -fused[i][1], i))  # type: ignore[operator]
    slots = iter(ranked)
    out: Hits = []
    for i, (doc, rrf) in enumerate(fused):
        if scores[i] is None:
            out.append((doc, -rrf))
        else:
            j = next(slots)
            out.append((fused[j][0], float(scores[j])))  # type: ignore[arg-type]
    return out


def order_by_scores(fused: Hits, scores: Sequence[float]) -> Hits:
    """Sort candidates by a reranker's real-valued scores (the cross-encoder), ties broken by RRF order."""
    if len(fused) != len(scores):
        raise ValueError(f"{len(scores)} scores for {len(fused)} candidates")
    order = sorted(range(len(fused)), key=lambda i: (-scores[i], -fused[i][1], i))
    return [(fused[i][0], float(scores[i])) for i in order]


def interpolate_scores(candidates: Sequence[str], reranker: Mapping[str, float], sparse: Hits, dense: Hits,
                       dense_weight: float, bm25_weight: float) -> Hits:
    """``s̃_rerank + w_dense·s̃_dense + w_bm25·s̃_bm25`` over the candidates, best first.

    Each score is min–max normalized over its own list for this post (the reranker's over the candidates it
    scored, each retriever's over its top hits); a candidate a list lacks — one the retriever did not return, or
    whose reranker answer did not parse — gets 0 from it. Ties keep the candidates' order (RRF's).
    """
    if dense_weight < 0 or bm25_weight < 0:
        raise ValueError(f"interpolation weights must be >= 0, got dense {dense_weight}, bm25 {bm25_weight}")
    rerank = minmax_normalize([(d, float(reranker[d])) for d in candidates if d in reranker])
    dense_scores, bm25_scores = minmax_normalize(dense), minmax_normalize(sparse)
    total = {d: rerank.get(d, 0.0) + dense_weight * dense_scores.get(d, 0.0) + bm25_weight * bm25_scores.get(d, 0.0)
             for d in candidates}
    order = sorted(range(len(candidates)), key=lambda i: (-total[candidates[i]], i))
    return [(candidates[i], total[candidates[i]]) for i in order]


def top_ids(hits: Hits, top: int) -> list[str]:
    """The first ``top`` doc ids of a ranking."""
    return [doc for doc, _ in hits[:top]]


def score_rankings(rankings: Mapping[str, Sequence[str]], posts: Sequence[Post]) -> dict[str, float]:
    """MRR@5, hit@1, hit@5 of post_id → ranked ids against the posts' gold ids (CheckThat definition); a post
    without a ranking scores 0."""
    scores = checkthat_scores(rankings, {p.post_id: p.gold for p in posts})
    return {m: round(float(scores[m]), 4) for m in METRICS}


def fuse_back(reranked: Hits, stage: FirstStage, config: Any) -> Hits:
    """The reranker's order as a third ranking beside BM25's and dense's, fused by RRF k (``rerank_fusion``)."""
    return reciprocal_rank_fusion([reranked, stage.sparse, stage.dense], config.rrf_k, config.fusion_depth)


def interpolate(scores: Mapping[str, float], stage: FirstStage, config: Any) -> Hits:
    """The reranker's scores of the RRF head summed with the first stage's (``rerank_*_weight``)."""
    return interpolate_scores([d for d, _ in stage.fused], scores, stage.sparse, stage.dense,
                              config.rerank_dense_weight, config.rerank_bm25_weight)


def interpolated_name(config: Any) -> str:
    return f"interpolated (dense {config.rerank_dense_weight:g}, BM25 {config.rerank_bm25_weight:g})"

