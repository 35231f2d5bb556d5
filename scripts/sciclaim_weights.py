"""Choose SciClaimSeekers' interpolation weights (``rerank_dense_weight``, ``rerank_bm25_weight``) on a split.

Usage: .venv/bin/python scripts/sciclaim_weights.py --config configs/pipelines/sciclaimseekers_embedded.yaml \
           --prepared_dir runs/prep --task climate_fever --split train --output_dir runs/sciclaim/weights_train

Takes every option of ``veracity infer sciclaim``. Runs the first stage and the cross-encoder over the RRF head of
every post once, then scores each grid point of (dense weight, BM25 weight) on the same scores. The rule: the
point whose MRR@5 averaged with its grid neighbours' (a plateau, not a lucky spike) is highest. Prints the grid
and writes ``<output_dir>/weights.json``. Tune on ``train``, never on ``dev``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from veracity.config import parse_config
from veracity.data_prep.checkthat_files import read_collection, read_posts
from veracity.infer.pipelines.sciclaimseekers.pipeline import SciClaimPipeline, resolve_inputs
from veracity.infer.pipelines.sciclaimseekers.ranking import interpolate, score_rankings, top_ids
from veracity.infer.pipelines.sciclaimseekers.run import make_parser
from veracity.io import write_json

DENSE = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)
BM25 = (0.0, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0)


def plateau_choice(grid: dict[tuple[int, int], float]) -> tuple[int, int]:
    """The grid index whose value averaged with its (up to 4) neighbours' is highest; ties to the first."""
    def smoothed(i: int, j: int) -> float:
        near = [(i + a, j + b) for a, b in ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)) if (i + a, j + b) in grid]
        return sum(grid[p] for p in near) / len(near)

    return max(sorted(grid), key=lambda ij: smoothed(*ij))


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    config, engine_config = parse_config(make_parser(), argv)
    posts_path, collection_path = resolve_inputs(config)
    posts = read_posts(posts_path)[: config.max_examples or None]
    pipeline = SciClaimPipeline(config, engine_config, read_collection(collection_path), ("cross_encoder",))
    stages = pipeline.first_stage(posts)
    scores = [dict(pipeline.cross_encoder_rerank(p, s.fused)) for p, s in zip(posts, stages, strict=True)]
    grid = {}
    for i, dense in enumerate(DENSE):
        for j, bm25 in enumerate(BM25):
            weighted = replace(config, rerank_dense_weight=dense, rerank_bm25_weight=bm25, rerank_fusion=False)
            rankings = {p.post_id: top_ids(interpolate(c, s, weighted), config.top_k)
                        for p, c, s in zip(posts, scores, stages, strict=True)}
            grid[i, j] = score_rankings(rankings, posts)["mrr@5"]
    i, j = plateau_choice(grid)
    print(f"MRR@5 on {config.task or posts_path} {config.split} ({len(posts)} posts); rows: dense weight, "
          "columns: BM25 weight")
    print("| dense \\ BM25 | " + " | ".join(f"{b:g}" for b in BM25) + " |")
    print("|---|" + "---:|" * len(BM25))
    for a, dense in enumerate(DENSE):
        print(f"| {dense:g} | " + " | ".join(f"{grid[a, b]:.3f}" for b in range(len(BM25))) + " |")
    choice = {"rerank_dense_weight": DENSE[i], "rerank_bm25_weight": BM25[j], "mrr@5": grid[i, j],
              "posts": len(posts), "split": config.split, "cross_encoder_only": grid[0, 0]}
    print(f"chosen (best with its neighbours): rerank_dense_weight {DENSE[i]:g}, rerank_bm25_weight {BM25[j]:g} "
          f"(MRR@5 {grid[i, j]:.3f}; cross-encoder alone {grid[0, 0]:.3f})")
    write_json(Path(config.output_dir) / "weights.json", choice)
    return choice


if __name__ == "__main__":
    main()
