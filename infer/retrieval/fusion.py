"""Pure fusion and re-ranking functions on plain data (docs/retrieval.md#fusion-and-rerank).

A ranked list is ``list[tuple[doc_id, score]]``, best first. Nothing here knows about models or indexes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Hits = list[tuple[str, float]]

# The one home of the fusion constants every retriever, pipeline and evaluation starts from: α = 0.5 (equal weight
# of BM25 and dense: docs/pipelines/r2vc.md#how-it-works) and RRF k = 60 (the usual constant:
# docs/pipelines/sciclaimseekers.md#how-it-works). `veracity eval retrieval` tunes α per benchmark and writes the
# tuned settings for `index search --config` (and their α for `infer r2vc --alpha`).
DEFAULT_ALPHA = 0.5
DEFAULT_RRF_K = 60


def minmax_normalize(hits: Hits) -> dict[str, float]:
    """Scores of one retriever for one query rescaled to [0, 1].

    When all scores are equal (or there is one hit) every document gets 1.0: the retriever expressed no
    preference among the documents it returned, and returning them at all is its signal.
    """
    if not hits:
        return {}
    scores = [s for _, s in hits]
    low, high = min(scores), max(scores)
    if high == low:
        return {doc: 1.0 for doc, _ in hits}
    return {doc: (s - low) / (high - low) for doc, s in hits}


def alpha_fusion(sparse: Hits, dense: Hits, alpha: float, k: int | None = None) -> Hits:
    """R2VC hybrid score ``r = α·s̃_sparse + (1−α)·s̃_dense`` over the outer join on doc id.

    Scores are min–max normalized per retriever and per query; a document one retriever did not return
    contributes 0 from it. Ties are broken by doc id so the order is deterministic.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    s, d = minmax_normalize(sparse), minmax_normalize(dense)
    fused = {doc: alpha * s.get(doc, 0.0) + (1 - alpha) * d.get(doc, 0.0) for doc in s.keys() | d.keys()}
    ranked = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:k] if k is not None else ranked


def reciprocal_rank_fusion(rankings: Sequence[Hits], k: int = 60, top: int | None = None) -> Hits:
    """RRF: ``Σ_r 1 / (k + rank_r(d))`` with 1-based ranks; a list that lacks ``d`` adds nothing."""
    if k < 0:
        raise ValueError(f"RRF k must be >= 0, got {k}")
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, (doc, _) in enumerate(ranking, start=1):
            fused[doc] = fused.get(doc, 0.0) + 1.0 / (k + rank)
    ranked = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:top] if top is not None else ranked


def mmr(
    query_vector: np.ndarray,
    candidate_vectors: np.ndarray,
    candidate_ids: Sequence[str],
    lambda_: float = 0.75,
    top: int = 10,
) -> Hits:
    """Maximal Marginal Relevance (Carbonell & Goldstein 1998) over L2-normalized vectors.

    Greedily picks ``argmax λ·sim(q, d) − (1−λ)·max_{s∈S} sim(d, s)``; λ = 0.75 weighs similarity to the query
    3:1 against redundancy (AIC CTU: docs/pipelines/aic.md#retrieval). Returns ``(doc_id, mmr_score_when_picked)``
    in pick order.
    """
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"lambda must be in [0, 1], got {lambda_}")
    n = len(candidate_ids)
    if candidate_vectors.shape[0] != n:
        raise ValueError(f"{candidate_vectors.shape[0]} vectors for {n} candidate ids")
    if n == 0:
        return []
    relevance = candidate_vectors @ query_vector
    pairwise = candidate_vectors @ candidate_vectors.T
    chosen: list[int] = []
    picked: Hits = []
    redundancy = np.full(n, -np.inf)
    available = np.ones(n, dtype=bool)
    for _ in range(min(top, n)):
        penalty = np.where(np.isfinite(redundancy), redundancy, 0.0)
        score = lambda_ * relevance - (1 - lambda_) * penalty
        score[~available] = -np.inf
        best = int(np.argmax(score))
        chosen.append(best)
        picked.append((candidate_ids[best], float(score[best])))
        available[best] = False
        redundancy = np.maximum(redundancy, pairwise[best])
    return picked
