"""SciClaimSeekers' ablation (``--ablation true``): every configuration of the paper's Table 2 (+ α-fusion) on the
same first-stage lists, one post at a time, so that the ablation resumes and shards like any run.

A post's record holds each configuration's top ids (:func:`ablation_rankings`); the table is made from the records
alone (:func:`ablation_table`): ``rows: {configuration: {mrr@5, hit@1, hit@5}}``, ``n`` (posts per row), one
submission per configuration. The LLM rerank is the slow row: only the first ``ablation_llm_posts`` posts get it,
and every other configuration is also reported on those posts, so that its row has neighbours.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.data_prep.checkthat_files import Post, write_submission
from veracity.infer.pipelines.sciclaimseekers.config import SciClaimConfig
from veracity.infer.pipelines.sciclaimseekers.ranking import (
    METRICS,
    FirstStage,
    fuse_back,
    interpolate,
    interpolated_name,
    score_rankings,
    top_ids,
)
from veracity.infer.retrieval.fusion import alpha_fusion


def slug(name: str) -> str:
    """A configuration's submission file name."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def names(config: SciClaimConfig) -> dict[str, str]:
    """The configurations' names by role, in the table's order."""
    rrf, alpha, depth = f"RRF k={config.rrf_k}", f"α-fusion α={config.alpha:g}", config.fusion_depth
    found = {"bm25": "BM25", "dense": "dense", "rrf": rrf, "alpha": alpha,
             "rrf_ce": f"{rrf} + cross-encoder@{depth}", "rrf_ce_fused": f"{rrf} + cross-encoder@{depth}, fused back"}
    if config.interpolates:
        found["rrf_ce_interpolated"] = f"{rrf} + cross-encoder@{depth}, {interpolated_name(config)}"
    found["alpha_ce"] = f"{alpha} + cross-encoder@{depth}"
    found["llm"] = f"{rrf} + LLM rerank@{depth}"
    return found


def llm_posts(config: SciClaimConfig, total: int) -> int:
    """How many posts (the first ones) the LLM reranks."""
    return min(config.ablation_llm_posts or total, total)


def ablation_rankings(pipeline: Any, config: SciClaimConfig, post: Post, stage: FirstStage,
                      with_llm: bool) -> tuple[dict[str, list[str]], dict[str, Any] | None]:
    """Each configuration's top ids for one post (the cross-encoder over each fusion's head: the paper reranks
    RRF's, α-fusion's is the R2VC first stage; its RRF scores also fused back and interpolated, no new calls), and
    the decoding facts of the LLM rerank's answers (None without one)."""
    k, named = config.top_k, names(config)
    alpha_head = alpha_fusion(stage.sparse, stage.dense, config.alpha, config.fusion_depth)
    reranked = pipeline.cross_encoder_rerank(post, stage.fused)
    rankings = {named["bm25"]: top_ids(stage.sparse, k), named["dense"]: top_ids(stage.dense, k),
                named["rrf"]: top_ids(stage.fused, k), named["alpha"]: top_ids(alpha_head, k),
                named["rrf_ce"]: top_ids(reranked, k), named["rrf_ce_fused"]: top_ids(fuse_back(reranked, stage,
                                                                                              config), k)}
    if "rrf_ce_interpolated" in named:
        rankings[named["rrf_ce_interpolated"]] = top_ids(interpolate(dict(reranked), stage, config), k)
    rankings[named["alpha_ce"]] = top_ids(pipeline.cross_encoder_rerank(post, alpha_head), k)
    decoding = None
    if with_llm:
        hits, _, decoding = pipeline.llm_rerank(post, stage.fused)
        rankings[named["llm"]] = top_ids(hits, k)
    return rankings, decoding


def ablation_table(config: SciClaimConfig, records: Sequence[dict[str, Any]], out: Path | None = None
                   ) -> dict[str, Any]:
    """``{"rows", "n"}`` from the batch records of every post, in post order (a failed post scores 0 in every
    row); with ``out``, one submission per configuration under ``out/submissions``."""
    posts = [Post(r["id"], "", list(r.get("gold") or (r.get("result") or {}).get("gold") or [])) for r in records]
    n_llm = llm_posts(config, len(posts))
    llm_name = names(config)["llm"]
    runs: dict[str, dict[str, list[str]]] = {name: {} for name in names(config).values()}
    for record in records:
        for name, ids in ((record.get("result") or {}).get("rankings") or {}).items():
            runs.setdefault(name, {})[record["id"]] = ids
    rows, counts = {}, {}
    for name, rankings in runs.items():
        scored = posts[:n_llm] if name == llm_name else posts
        label = name if len(scored) == len(posts) else f"{name} (first {n_llm} posts)"
        rows[label], counts[label] = score_rankings(rankings, scored), len(scored)
        if out is not None:
            write_submission(out / "submissions" / f"{slug(name)}.tsv", rankings, config.top_k)
    if n_llm < len(posts):  # the other configurations on the LLM subset, so that its row has neighbours
        for name, rankings in runs.items():
            if name != llm_name:
                label = f"{name} (first {n_llm} posts)"
                rows[label], counts[label] = score_rankings(rankings, posts[:n_llm]), n_llm
    return {"rows": rows, "n": counts}


def markdown_table(result: dict[str, Any]) -> str:
    lines = ["| configuration | posts | " + " | ".join(METRICS) + " |", "|---|---:|" + "---:|" * len(METRICS)]
    for label, metrics in result["rows"].items():
        lines.append(f"| {label} | {result['n'][label]} | " + " | ".join(f"{metrics[m]:.3f}" for m in METRICS) + " |")
    return "\n".join(lines)
