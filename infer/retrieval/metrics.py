"""Retrieval metrics as pure functions of a ranked id list and the gold ids."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def recall_at_k(ranked: Sequence[str], gold: set[str], k: int) -> float:
    """Share of the gold ids found in the top ``k``."""
    return len(set(ranked[:k]) & gold) / len(gold) if gold else 0.0


def hit_at_k(ranked: Sequence[str], gold: set[str], k: int) -> float:
    """1 if any gold id is in the top ``k``."""
    return float(any(doc in gold for doc in ranked[:k]))


def reciprocal_rank(ranked: Sequence[str], gold: set[str], k: int = 5) -> float:
    """1 / rank of the first gold id within the top ``k`` (MRR@k's per-query term), else 0."""
    for rank, doc in enumerate(ranked[:k], start=1):
        if doc in gold:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], gold: set[str], k: int = 10) -> float:
    """Binary-relevance nDCG@k."""
    dcg = sum(1.0 / math.log2(rank + 1) for rank, doc in enumerate(ranked[:k], start=1) if doc in gold)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(gold), k) + 1))
    return dcg / ideal if ideal else 0.0


def retrieval_metrics(rankings: Sequence[Sequence[str]], golds: Sequence[set[str]]) -> dict[str, float]:
    """Mean Recall@{5,10,20,50}, MRR@5, Hit@1, Hit@5 and nDCG@10 over queries."""
    if len(rankings) != len(golds):
        raise ValueError(f"{len(rankings)} rankings for {len(golds)} gold sets")
    per_query = {
        "recall@5": [recall_at_k(r, g, 5) for r, g in zip(rankings, golds, strict=True)],
        "recall@10": [recall_at_k(r, g, 10) for r, g in zip(rankings, golds, strict=True)],
        "recall@20": [recall_at_k(r, g, 20) for r, g in zip(rankings, golds, strict=True)],
        "recall@50": [recall_at_k(r, g, 50) for r, g in zip(rankings, golds, strict=True)],
        "mrr@5": [reciprocal_rank(r, g, 5) for r, g in zip(rankings, golds, strict=True)],
        "hit@1": [hit_at_k(r, g, 1) for r, g in zip(rankings, golds, strict=True)],
        "hit@5": [hit_at_k(r, g, 5) for r, g in zip(rankings, golds, strict=True)],
        "ndcg@10": [ndcg_at_k(r, g, 10) for r, g in zip(rankings, golds, strict=True)],
    }
    return {name: float(np.mean(values)) if values else 0.0 for name, values in per_query.items()}
