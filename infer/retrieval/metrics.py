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


def per_query_metrics(rankings: Sequence[Sequence[str]], golds: Sequence[set[str]]) -> dict[str, list[float]]:
    """Recall@{5,10,20,50}, MRR@5, Hit@1, Hit@5 and nDCG@10 of each query, in query order."""
    if len(rankings) != len(golds):
        raise ValueError(f"{len(rankings)} rankings for {len(golds)} gold sets")
    pairs = list(zip(rankings, golds, strict=True))
    return {
        "recall@5": [recall_at_k(r, g, 5) for r, g in pairs],
        "recall@10": [recall_at_k(r, g, 10) for r, g in pairs],
        "recall@20": [recall_at_k(r, g, 20) for r, g in pairs],
        "recall@50": [recall_at_k(r, g, 50) for r, g in pairs],
        "mrr@5": [reciprocal_rank(r, g, 5) for r, g in pairs],
        "hit@1": [hit_at_k(r, g, 1) for r, g in pairs],
        "hit@5": [hit_at_k(r, g, 5) for r, g in pairs],
        "ndcg@10": [ndcg_at_k(r, g, 10) for r, g in pairs],
    }


def retrieval_metrics(rankings: Sequence[Sequence[str]], golds: Sequence[set[str]]) -> dict[str, float]:
    """Mean Recall@{5,10,20,50}, MRR@5, Hit@1, Hit@5 and nDCG@10 over queries."""
    per_query = per_query_metrics(rankings, golds)
    return {name: float(np.mean(values)) if values else 0.0 for name, values in per_query.items()}


def paired_randomization_test(a: Sequence[float], b: Sequence[float], samples: int = 10_000, seed: int = 0) -> float:
    """Two-sided p-value of a paired randomization (sign-flip) test of mean(a) - mean(b) = 0.

    Under the null hypothesis each query's difference is as likely to have either sign. Up to 16 queries every
    sign assignment is enumerated (exact); beyond, ``samples`` seeded random ones are drawn and the p-value is
    ``(hits + 1) / (samples + 1)``, never 0 (Smucker et al., CIKM 2007, recommend this test for IR).
    """
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if diff.shape != (len(b),):
        raise ValueError(f"paired scores needed: {len(a)} vs {len(b)}")
    observed = abs(diff.mean()) if len(diff) else 0.0
    if len(diff) == 0 or not np.any(diff):
        return 1.0
    tolerance = 1e-12  # a permuted mean equal to the observed one (float noise) counts as at least as extreme
    if len(diff) <= 16:
        signs = 1 - 2 * ((np.arange(2 ** len(diff))[:, None] >> np.arange(len(diff))) & 1)
        means = np.abs((signs * diff).mean(axis=1))
        return float(np.mean(means >= observed - tolerance))
    rng = np.random.default_rng(seed)
    signs = rng.choice((-1.0, 1.0), size=(samples, len(diff)))
    hits = int(np.sum(np.abs((signs * diff).mean(axis=1)) >= observed - tolerance))
    return (hits + 1) / (samples + 1)
