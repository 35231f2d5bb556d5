"""Fusion, RRF, MMR and retrieval metrics on hand-made inputs with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from veracity.infer.retrieval.analyzers import Analyzer
from veracity.infer.retrieval.fusion import alpha_fusion, minmax_normalize, mmr, reciprocal_rank_fusion
from veracity.infer.retrieval.metrics import ndcg_at_k, reciprocal_rank, retrieval_metrics


def test_minmax_normalize() -> None:
    assert minmax_normalize([("a", 10.0), ("b", 5.0), ("c", 0.0)]) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert minmax_normalize([("a", 3.0)]) == {"a": 1.0}
    assert minmax_normalize([]) == {}


def test_alpha_fusion_outer_join_missing_counts_zero() -> None:
    sparse = [("a", 12.0), ("b", 6.0), ("c", 0.0)]  # normalized: a 1, b .5, c 0
    dense = [("b", 0.9), ("d", 0.5), ("a", 0.1)]  # normalized: b 1, d .5, a 0
    fused = dict(alpha_fusion(sparse, dense, alpha=0.3))
    assert fused == pytest.approx({"a": 0.3, "b": 0.3 * 0.5 + 0.7, "c": 0.0, "d": 0.7 * 0.5})
    assert [d for d, _ in alpha_fusion(sparse, dense, 0.3)] == ["b", "d", "a", "c"]
    assert [d for d, _ in alpha_fusion(sparse, dense, 1.0, k=2)] == ["a", "b"]
    assert [d for d, _ in alpha_fusion(sparse, dense, 0.0, k=2)] == ["b", "d"]
    with pytest.raises(ValueError):
        alpha_fusion(sparse, dense, 1.5)


def test_rrf_known_values() -> None:
    r1 = [("a", 9.0), ("b", 8.0), ("c", 7.0)]
    r2 = [("c", 0.9), ("a", 0.8)]
    fused = dict(reciprocal_rank_fusion([r1, r2], k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["b"] == pytest.approx(1 / 62)
    assert [d for d, _ in reciprocal_rank_fusion([r1, r2], k=60, top=2)] == ["a", "c"]
    # k = 0 makes rank 1 worth 1.0 exactly
    assert dict(reciprocal_rank_fusion([r1], k=0))["a"] == 1.0


def test_mmr_skips_near_duplicates() -> None:
    def unit(degrees: float) -> list[float]:
        return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]

    q = np.array(unit(20))
    # a: most relevant (20° off); b: a near-duplicate of a (21° off); c: less relevant (25° off) but different
    vectors = np.array([unit(0), unit(-1), unit(45)])
    picked = mmr(q, vectors, ["a", "b", "c"], lambda_=0.5, top=2)
    assert [d for d, _ in picked] == ["a", "c"]
    pure_relevance = mmr(q, vectors, ["a", "b", "c"], lambda_=1.0, top=3)
    assert [d for d, _ in pure_relevance] == ["a", "b", "c"]
    assert mmr(q, np.zeros((0, 2)), [], top=3) == []
    with pytest.raises(ValueError):
        mmr(q, vectors, ["a", "b"], top=2)


def test_mmr_first_pick_score_is_lambda_times_relevance() -> None:
    picked = mmr(np.array([1.0, 0.0]), np.array([[0.6, 0.8], [0.0, 1.0]]), ["x", "y"], lambda_=0.75, top=1)
    assert picked == [("x", pytest.approx(0.75 * 0.6))]


def test_metrics_known_values() -> None:
    assert reciprocal_rank(["x", "g", "y"], {"g"}, 5) == 0.5
    assert reciprocal_rank(["x"] * 5 + ["g"], {"g"}, 5) == 0.0
    assert ndcg_at_k(["g1", "x", "g2"], {"g1", "g2"}, 10) == pytest.approx(
        (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)))
    metrics = retrieval_metrics([["a", "b"], ["c", "d"]], [{"b"}, {"z"}])
    assert metrics["mrr@5"] == 0.25 and metrics["hit@1"] == 0.0 and metrics["hit@5"] == 0.5
    assert metrics["recall@5"] == 0.5


def test_analyzers() -> None:
    social = Analyzer("social")
    assert social("RT @who: #LongCovid hits 10% of adults https://t.co/x &amp; kids!") == [
        "rt", "long", "covid", "hits", "10", "adults", "kids"]
    assert Analyzer()("The Cats are on the mat") == ["cats", "mat"]
    assert Analyzer(stem=True)("running studies") == ["run", "studi"]
    with pytest.raises(ValueError, match="unknown analyzer"):
        Analyzer("klingon")


def test_e5_config_carries_the_paper_instruction() -> None:
    from pathlib import Path

    import yaml

    from veracity.infer.retrieval.dense import E5_INSTRUCT_QUERY_PREFIX

    config = yaml.safe_load((Path(__file__).parents[1] / "configs/retrieval/sciclaimseekers_e5.yaml").read_text())
    assert config["query_prefix"] == E5_INSTRUCT_QUERY_PREFIX
