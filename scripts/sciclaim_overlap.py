"""MRR@5 of every configuration of a SciClaimSeekers ablation, on the posts whose gold papers a training split
also has as gold and on those it has not: what a reranker fine-tuned on that split may owe to memorising papers.

Usage: .venv/bin/python scripts/sciclaim_overlap.py --run runs/sciclaim/ablation_climate_fever_tuned \
           --train_posts runs/sciclaim/ablation_climate_fever_tuned/task/posts_train.tsv

Reads ``<run>/submissions/*.tsv`` (those covering every post) and the run's posts (``posts_file`` in its
``metrics.json``); prints a table and writes ``<run>/overlap.json``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from veracity.data_prep.checkthat_files import Post, read_posts, read_submission
from veracity.infer.eval.sciclaim import checkthat_scores


def split_by_overlap(posts: Sequence[Post], train: Sequence[Post]) -> dict[str, list[Post]]:
    """``seen``: posts with a gold id that is also a gold id of a training post; ``unseen``: the others."""
    seen_ids = {g for p in train for g in p.gold}
    groups: dict[str, list[Post]] = {"seen": [], "unseen": []}
    for post in posts:
        groups["seen" if seen_ids & set(post.gold) else "unseen"].append(post)
    return groups


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="An ablation's output_dir.")
    parser.add_argument("--train_posts", required=True, help="The training posts TSV (with gold ids).")
    args = parser.parse_args(argv)
    run = Path(args.run)
    posts = read_posts(json.loads((run / "metrics.json").read_text())["posts_file"])
    groups = split_by_overlap(posts, read_posts(args.train_posts))
    table = {}
    for path in sorted((run / "submissions").glob("*.tsv")):
        rankings = read_submission(path)
        if set(rankings) != {p.post_id for p in posts}:
            continue  # the LLM row covers only the first posts
        table[path.stem] = {name: round(float(checkthat_scores(rankings, {p.post_id: p.gold for p in group})
                                              ["mrr@5"]), 4) for name, group in groups.items()}
    print(f"| configuration | seen ({len(groups['seen'])} posts) | unseen ({len(groups['unseen'])} posts) |")
    print("|---|---:|---:|")
    for name, row in table.items():
        print(f"| {name} | {row['seen']:.3f} | {row['unseen']:.3f} |")
    (run / "overlap.json").write_text(json.dumps({"n": {k: len(v) for k, v in groups.items()}, "rows": table},
                                                 indent=1) + "\n")
    return table


if __name__ == "__main__":
    main()
